//! Start-up of a node: listen at once, serve once the store is there.
//!
//! A node whose Redis is not reachable yet (it starts before Redis, or
//! Redis restarts meanwhile) keeps trying with a capped backoff instead of
//! exiting, so that pods do not crash-loop on start order. Meanwhile its
//! listeners (main and admin) are bound and answer: `/healthz` 200 (alive),
//! `/readyz` 503 (not ready, and why), anything else 503 with `Retry-After`
//! and a JSON-RPC error. Once Redis answers, the node serves as usual;
//! SIGTERM while it waits ends it at once (exit 0: nothing was admitted,
//! nothing is to drain).
//!
//! # Design
//!
//! The runtime is built over a connected store: `Runtime::new` starts the
//! cluster duties (heartbeats, the control bus, the orphan sweep), and the
//! Redis store is built from the two connections it opens. Two ways to
//! answer before that:
//! - a store wrapper that connects lazily and fails every call until then:
//!   every port of the store, and every cluster duty, would then run
//!   against a store that is not there, and clients would get the errors of
//!   a Redis outage, which this is not;
//! - chosen: a placeholder app on the bound sockets (second handles of
//!   them), stopped once the store is connected; the node's real servers
//!   then take the same sockets, exactly as [`super::bind`] builds them.
//!   Nothing of the runtime exists until it can work. Between the two
//!   servers, new connections wait in the kernel's accept queue; the
//!   placeholder closes each connection after its answer (no keep-alive),
//!   so none stays with it.
//!
//! When Redis answers the first attempt, there is no placeholder at all.
//! Stdio mode does not wait: see [`super::open_store`].

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, ResponseError, web};
use mcp_cluster_http::connections::ConnectionGate;
use mcp_cluster_http::headers::check_host_and_origin;
use mcp_cluster_http::{HttpConfig, HttpError};
use mcp_cluster_redis::{ClusterError, RedisConfig};
use mcp_cluster_store::Store;
use tokio::time::Instant;

use super::{
    ADMIN_IDLE_TIMEOUT, ADMIN_IN_TRANSIT, ADMIN_MAX_CONNECTIONS, BoundNode, IN_TRANSIT_PER_WORKER,
    PAUSE_SETTLE, admin_gate, https, listen, max_connections, redis_config, serve_on, tcp_stream,
    wait_for_signal, workers,
};
use crate::{NodeConfig, Served};

/// Delay before the second connection attempt; doubled after each failure.
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(250);
/// Longest delay between two attempts: a node that waits notices Redis
/// within this once it is up.
const RETRY_MAX_DELAY: Duration = Duration::from_secs(5);
/// Failed attempts logged one by one; after them, at most one line per
/// [`FAILURE_LOG_INTERVAL`].
const FAILURES_LOGGED_EACH: u32 = 3;
/// Least time between two logged failures after the first few.
const FAILURE_LOG_INTERVAL: Duration = Duration::from_secs(5);
/// How long the placeholder's connections get to end once it stops: its
/// answers are immediate.
const PLACEHOLDER_SHUTDOWN_SECS: u64 = 1;
/// What the placeholder answers: `/readyz`'s body and the JSON-RPC error
/// message of every other request.
const NOT_CONNECTED: &str = "session store not connected yet";

/// A node whose listeners are bound, serving or waiting for its store. Made
/// by [`start`]; [`Self::run`] serves it.
pub struct StartingNode {
    addrs: Vec<SocketAddr>,
    admin_addrs: Vec<SocketAddr>,
    stage: Stage,
}

/// Where the start-up is.
enum Stage {
    /// The store was open at once: the node is ready to serve.
    Bound(BoundNode),
    /// Redis did not answer yet.
    Waiting(Box<Waiting>),
}

/// A node waiting for Redis, with what it needs to be built once it
/// answers.
struct Waiting {
    server: Served,
    config: NodeConfig,
    redis: RedisConfig,
    /// The main listener, handed to the real server once connected.
    socket: TcpListener,
    /// The admin listener, likewise.
    admin_socket: Option<TcpListener>,
    /// The main listener's TLS, when configured: the placeholder's and then
    /// the real server's (one certificate, reloaded for both).
    tls: Option<crate::features::ServerTls>,
    /// The placeholder servers (main, and admin when configured), each on
    /// a second handle of its socket; stopped before the real ones start.
    placeholders: Vec<ServerHandle>,
    /// Connection attempts made so far.
    attempts: u32,
    /// Which failures reach the log.
    failures: FailureLog,
}

impl std::fmt::Debug for StartingNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartingNode")
            .field("addrs", &self.addrs)
            .field("admin_addrs", &self.admin_addrs)
            .field("waiting", &matches!(self.stage, Stage::Waiting(_)))
            .finish()
    }
}

/// Binds the listeners (main, and admin when configured) and opens the
/// store. When Redis does not answer, the node waits for it (see the
/// module doc): the listeners answer meanwhile, and [`StartingNode::run`]
/// keeps trying. Must run inside an actix system.
///
/// # Errors
/// An address cannot be bound, or the configuration is invalid (a Redis URL
/// that does not parse, a bad key prefix): those never get better by
/// waiting.
pub async fn start(server: impl Into<Served>, config: NodeConfig) -> std::io::Result<StartingNode> {
    let server = server.into();
    let socket = listen(config.bind)?;
    let admin_socket = config.admin_bind.map(listen).transpose()?;
    let tls = https(&config)?;
    let first = match redis_config(&config) {
        None => Ok(Store::memory_holding(
            config.retention.to_retention(),
            config.runtime.max_sessions,
        )),
        Some(redis) => crate::features::connect(&redis)
            .await
            .map_err(|err| (redis, err)),
    };
    let (redis, err) = match first {
        Ok(store) => {
            let node = serve_on(server, config, socket, admin_socket, tls, store).await?;
            return Ok(StartingNode::bound(node));
        }
        Err(failed) => failed,
    };
    let mut failures = FailureLog::default();
    failed(&redis, &err, 1, &mut failures)?;
    let addrs = vec![socket.local_addr()?];
    let admin_addrs = match &admin_socket {
        Some(admin) => vec![admin.local_addr()?],
        None => Vec::new(),
    };
    let main = if admin_socket.is_some() {
        Role::MainBesideAdmin
    } else {
        Role::Main
    };
    let http = Arc::new(config.http.clone());
    // The main listener's limits as the node will apply them, so that a
    // flood while the node waits cannot take the descriptors the admin
    // listener and the store's connection need.
    let exempt = http
        .exempt_networks()
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err))?;
    let main_gate = ConnectionGate::new(
        max_connections(http.max_connections, workers(&config)),
        http.max_connections_per_peer,
        exempt,
    );
    let mut placeholders = vec![placeholder(
        socket.try_clone()?,
        main,
        tls.clone(),
        Arc::clone(&http),
        main_gate,
    )?];
    if let Some(admin) = &admin_socket {
        let gate = admin_gate(&http)?;
        placeholders.push(placeholder(
            admin.try_clone()?,
            Role::Admin,
            None,
            http,
            gate,
        )?);
    }
    Ok(StartingNode {
        addrs,
        admin_addrs,
        stage: Stage::Waiting(Box::new(Waiting {
            server,
            config,
            redis,
            socket,
            admin_socket,
            tls,
            placeholders,
            attempts: 1,
            failures,
        })),
    })
}

impl StartingNode {
    fn bound(node: BoundNode) -> Self {
        Self {
            addrs: node.addrs().to_vec(),
            admin_addrs: node.admin_addrs().to_vec(),
            stage: Stage::Bound(node),
        }
    }

    /// The addresses the node listens on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The probe listener's addresses (empty without `admin_bind`).
    pub fn admin_addrs(&self) -> &[SocketAddr] {
        &self.admin_addrs
    }

    /// Whether the node still waits for its store.
    pub fn is_waiting(&self) -> bool {
        matches!(self.stage, Stage::Waiting(_))
    }

    /// Waits for the store if needed, then serves until SIGTERM or SIGINT,
    /// then drains (see [`BoundNode::run`]). A signal while it waits ends
    /// it at once.
    ///
    /// # Errors
    /// The HTTP server failed, or the store's configuration is invalid.
    pub async fn run(self) -> std::io::Result<()> {
        self.run_until(wait_for_signal()).await
    }

    /// As [`Self::run`], until `shutdown` completes instead of a signal.
    ///
    /// # Errors
    /// As [`Self::run`].
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()> + 'static,
    ) -> std::io::Result<()> {
        let mut waiting = match self.stage {
            Stage::Bound(node) => return node.run_until(shutdown).await,
            Stage::Waiting(waiting) => waiting,
        };
        let mut shutdown = Box::pin(shutdown);
        let connected = tokio::select! {
            connected = waiting.connect() => connected,
            () = &mut shutdown => {
                tracing::info!(attempts = waiting.attempts, "Stopped before the session store connected.");
                stop_placeholders(&waiting.placeholders).await;
                return Ok(());
            }
        };
        stop_placeholders(&waiting.placeholders).await;
        let store = connected?;
        let Waiting {
            server,
            config,
            socket,
            admin_socket,
            tls,
            ..
        } = *waiting;
        serve_on(server, config, socket, admin_socket, tls, store)
            .await?
            .run_until(shutdown)
            .await
    }
}

impl Waiting {
    /// Tries until Redis answers.
    ///
    /// Cancel safety: dropping it drops the attempt in progress, whose
    /// connections close with it.
    async fn connect(&mut self) -> std::io::Result<Store> {
        loop {
            tokio::time::sleep(retry_delay(self.attempts)).await;
            self.attempts += 1;
            match crate::features::connect(&self.redis).await {
                Ok(store) => {
                    tracing::info!(attempts = self.attempts, "Session store connected.");
                    return Ok(store);
                }
                Err(err) => failed(&self.redis, &err, self.attempts, &mut self.failures)?,
            }
        }
    }
}

/// Logs a failed attempt (as [`FailureLog`] allows). A configuration error
/// is returned instead: waiting would not mend it.
///
/// Redis refusing the node as configured (credentials, certificates, TLS
/// on one side only) is waited out too, logged as an error: the operator
/// must act, but what to fix may be on Redis's side (an ACL user created
/// later, a server certificate replaced), and every attempt reads the
/// password and certificate files again, so a corrected secret is picked up
/// without a restart. Meanwhile `/readyz` says the node is not connected.
fn failed(
    redis: &RedisConfig,
    err: &ClusterError,
    attempt: u32,
    failures: &mut FailureLog,
) -> std::io::Result<()> {
    let rejected = err.is_rejection();
    if !rejected && !err.is_outage() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            causes(err),
        ));
    }
    if let Some(unlogged) = failures.admit(Instant::now(), attempt) {
        let (url, retry_in, error) = (redis.redacted_url(), retry_delay(attempt), causes(err));
        if rejected {
            tracing::error!(
                attempt,
                unlogged,
                %url,
                ?retry_in,
                %error,
                "Redis refuses this node as configured; retrying."
            );
        } else {
            tracing::warn!(
                attempt,
                unlogged,
                %url,
                ?retry_in,
                %error,
                "Session store not connected yet; retrying."
            );
        }
    }
    Ok(())
}

/// An error and its causes on one line (the Redis client's reason, e.g.
/// "Connection refused", is a cause), each said once: an error that quotes
/// its cause already is not followed by it again.
fn causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// The wait after failed attempt `attempt` (1 for the first):
/// [`RETRY_FIRST_DELAY`] doubling up to [`RETRY_MAX_DELAY`].
fn retry_delay(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    RETRY_FIRST_DELAY
        .saturating_mul(1 << doublings)
        .min(RETRY_MAX_DELAY)
}

/// Rate limit on logged failures: the first [`FAILURES_LOGGED_EACH`], then
/// one per [`FAILURE_LOG_INTERVAL`] at most, saying how many were not
/// logged in between.
#[derive(Debug, Default)]
struct FailureLog {
    /// When the last logged failure was.
    last: Option<Instant>,
    /// Failures not logged since.
    unlogged: u32,
}

impl FailureLog {
    /// Whether failure `attempt` at `now` is logged: `Some` with the number
    /// of failures not logged since the last line, `None` to stay quiet.
    fn admit(&mut self, now: Instant, attempt: u32) -> Option<u32> {
        let due = attempt <= FAILURES_LOGGED_EACH
            || self
                .last
                .is_none_or(|last| now.duration_since(last) >= FAILURE_LOG_INTERVAL);
        if !due {
            self.unlogged += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// Which listener a placeholder stands in for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The main listener: probes, and 503 for everything else.
    Main,
    /// The main listener of a node with an admin listener: `/healthz` and
    /// `/readyz` (`/metrics` is the admin listener's), 503 for the rest.
    MainBesideAdmin,
    /// The admin listener: probes only.
    Admin,
}

/// Starts a placeholder server on `socket`: `/healthz` 200, `/readyz` 503,
/// and on the main listener 503 with `Retry-After` and a JSON-RPC error for
/// anything else; over TLS when `tls` is given (the main listener of an
/// HTTPS node). One worker, no keep-alive, connections admitted by `gate`
/// as the node's own server will (the admin listener's with its short
/// idle timeout); the caller stops it.
fn placeholder(
    socket: TcpListener,
    role: Role,
    tls: Option<crate::features::ServerTls>,
    http: Arc<HttpConfig>,
    gate: Arc<ConnectionGate>,
) -> std::io::Result<ServerHandle> {
    let (most, idle) = match role {
        Role::Admin => (ADMIN_MAX_CONNECTIONS + ADMIN_IN_TRANSIT, ADMIN_IDLE_TIMEOUT),
        Role::Main | Role::MainBesideAdmin => (
            gate.max() + IN_TRANSIT_PER_WORKER,
            Duration::from_secs(http.request_header_timeout_secs),
        ),
    };
    let server = HttpServer::new(move || {
        let http = Arc::clone(&http);
        let mut app = App::new()
            .route(
                "/healthz",
                web::get().to(|| async { HttpResponse::Ok().body("ok") }),
            )
            .route(
                "/readyz",
                web::get().to(|| async {
                    HttpResponse::ServiceUnavailable()
                        .insert_header((CONTENT_TYPE, "text/plain; charset=utf-8"))
                        .body(NOT_CONNECTED)
                }),
            );
        if role == Role::MainBesideAdmin {
            // As once the node runs: the admin listener's, not here.
            app = app.route(
                "/metrics",
                web::get().to(|| async { HttpResponse::NotFound().finish() }),
            );
        } else {
            // Scraped while starting too: the node is up, in phase
            // `starting` (a scraper sees why it is not ready). On the main
            // listener, as once the node runs: only for the hosts the MCP
            // endpoint accepts.
            app = app.route(
                "/metrics",
                web::get().to(move |req: HttpRequest| {
                    let http = Arc::clone(&http);
                    async move {
                        if role == Role::Main {
                            check_host_and_origin(&req, &http)?;
                        }
                        let metrics = mcp_cluster_telemetry::metrics::metrics();
                        let body = metrics.render(mcp_cluster_telemetry::metrics::NodeGauges {
                            drain_phase: mcp_cluster_telemetry::metrics::STARTING,
                            ..Default::default()
                        });
                        Ok::<_, HttpError>(
                            HttpResponse::Ok()
                                .insert_header((
                                    CONTENT_TYPE,
                                    mcp_cluster_telemetry::metrics::CONTENT_TYPE,
                                ))
                                .body(body),
                        )
                    }
                }),
            );
        }
        match role {
            Role::Main | Role::MainBesideAdmin => app.default_service(web::to(|| async {
                HttpError::Unavailable(NOT_CONNECTED).error_response()
            })),
            Role::Admin => {
                app.default_service(web::to(|| async { HttpResponse::NotFound().finish() }))
            }
        }
    })
    .disable_signals()
    .workers(1)
    .keep_alive(actix_web::http::KeepAlive::Disabled)
    .client_request_timeout(idle)
    .max_connections(most)
    .on_connect(move |connection, data| gate.on_connect(tcp_stream(connection), data))
    .shutdown_timeout(PLACEHOLDER_SHUTDOWN_SECS);
    let server = match tls {
        #[cfg(feature = "tls")]
        Some(tls) => server
            .tls_handshake_timeout(super::TLS_HANDSHAKE_TIMEOUT)
            .listen_rustls_0_23(socket, tls)?,
        #[cfg(not(feature = "tls"))]
        Some(tls) => match tls {},
        None => server.listen(socket)?,
    }
    .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    Ok(handle)
}

/// Stops the placeholders: accepting first (what arrives then waits in
/// the kernel's queue for the real server), then their workers, once the
/// answers in progress are written.
async fn stop_placeholders(placeholders: &[ServerHandle]) {
    for handle in placeholders {
        handle.pause().await;
    }
    // The pause reaches the accept loop asynchronously.
    tokio::time::sleep(PAUSE_SETTLE).await;
    for handle in placeholders {
        handle.stop(true).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_a_quarter_second_to_five() {
        let delays: Vec<u128> = (1..=8).map(|n| retry_delay(n).as_millis()).collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX_DELAY);
    }

    #[test]
    fn failures_are_logged_one_by_one_then_once_per_interval() {
        let start = Instant::now();
        let mut log = FailureLog::default();
        let at = |secs: u64| start + Duration::from_secs(secs);
        assert_eq!(log.admit(at(0), 1), Some(0));
        assert_eq!(log.admit(at(0), 2), Some(0));
        assert_eq!(log.admit(at(1), 3), Some(0));
        assert_eq!(log.admit(at(2), 4), None);
        assert_eq!(log.admit(at(4), 5), None);
        assert_eq!(log.admit(at(6), 6), Some(2));
        assert_eq!(log.admit(at(10), 7), None);
        assert_eq!(log.admit(at(11), 8), Some(1));
    }

    #[test]
    fn causes_are_joined_on_one_line() {
        let err = std::io::Error::other(ClusterError::Timeout(Duration::from_secs(1)));
        assert_eq!(causes(&err), "redis did not answer within 1s");
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let outer = std::io::Error::other(Wrapped("cannot connect", refused));
        assert_eq!(causes(&outer), "cannot connect: refused");
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let quoting = std::io::Error::other(Wrapped("cannot connect: refused", refused));
        assert_eq!(causes(&quoting), "cannot connect: refused");
    }

    /// An error with a message and a cause.
    #[derive(Debug)]
    struct Wrapped(&'static str, std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }
}
