//! Running a server as a node: Streamable HTTP (and legacy HTTP+SSE) on the
//! embedded store, health endpoints, and a drain on SIGTERM / SIGINT.
//!
//! Drain: readiness goes false, new sessions are refused, in-flight
//! requests get `drain_grace_secs` (late in it, no new work is admitted),
//! then the rest answer -32603, every SSE connection ends with `retry`
//! (clients reconnect, elsewhere behind a load balancer) and the process
//! exits. See `drain` below.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use mcp_http::HttpState;
use mcp_runtime::Runtime;
use mcp_store::Store;
use tokio::sync::broadcast::error::RecvError;

use crate::{McpServer, NodeConfig};

/// How often the drain checks for running requests.
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// How long stopped requests get to write their -32603 answers.
const STOP_WRITE_LIMIT: Duration = Duration::from_secs(2);

/// A node about to serve: bound, not yet running.
pub struct BoundNode {
    server: actix_web::dev::Server,
    runtime: Runtime,
    addrs: Vec<SocketAddr>,
    drain_grace: Duration,
}

impl std::fmt::Debug for BoundNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundNode")
            .field("addrs", &self.addrs)
            .finish()
    }
}

impl BoundNode {
    /// The addresses it listens on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The runtime (for embedding and tests).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
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
        let runtime = self.runtime.clone();
        let grace = self.drain_grace;
        let drained = actix_web::rt::spawn(async move {
            shutdown.await;
            let answered = drain(&runtime, grace).await;
            // The listener closes and the workers stop once their (now
            // finished) connections end.
            handle.stop(true).await;
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

/// The drain, up to the point where the listener may close:
///
/// 1. Readiness fails and no new session starts here; requests of existing
///    sessions are still served while the load balancer catches up, until
///    the node is idle or half the grace period is over.
/// 2. No more work is admitted (503, the client retries elsewhere); what
///    was admitted gets the rest of the grace period to finish.
/// 3. What still runs answers -32603 into its stream.
/// 4. SSE connections end with `retry` once they sent what the log holds;
///    clients resume from the log on another node.
///
/// Session actors live on the HTTP workers, which stop with the listener:
/// every admitted request is answered before that. Returns whether all
/// were (else the node must not leave the cluster: a survivor finalizes
/// its open streams once its heartbeat expires).
async fn drain(runtime: &Runtime, grace: Duration) -> bool {
    let start = tokio::time::Instant::now();
    let deadline = start + grace;
    tracing::info!(in_flight = runtime.in_flight(), "Draining.");
    runtime.start_drain();
    let serving_until = start + grace / 2;
    while runtime.open_exchanges() > 0 && tokio::time::Instant::now() < serving_until {
        tokio::time::sleep(DRAIN_POLL).await;
    }
    runtime.start_closing();
    // A request that passed the admission check a moment ago opens its
    // exchange right away; give it that moment.
    tokio::time::sleep(DRAIN_POLL).await;
    while runtime.open_exchanges() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(DRAIN_POLL).await;
    }
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
    let answered = runtime.open_exchanges() == 0;
    runtime.close_streams();
    answered
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
/// # Errors
/// Redis cannot be reached or its configuration is invalid.
pub async fn open_store(config: &NodeConfig) -> std::io::Result<Store> {
    let Some(redis) = &config.redis else {
        return Ok(Store::memory(config.retention.to_retention()));
    };
    let mut redis = redis.clone();
    // One retention setting for both stores.
    redis.retention = config.retention.to_retention().into();
    mcp_cluster::connect(&redis)
        .await
        .map_err(std::io::Error::other)
}

/// Opens the store, builds the runtime and binds the HTTP server. Must run
/// inside an actix system (`#[actix_web::main]`).
///
/// # Errors
/// The store cannot be opened or the address cannot be bound.
pub async fn bind(server: McpServer, config: NodeConfig) -> std::io::Result<BoundNode> {
    let store = open_store(&config).await?;
    let runtime = Runtime::new(Arc::new(server.clone()), store, config.runtime.clone());
    forward_events(&server, &runtime);
    let state = HttpState {
        runtime: runtime.clone(),
        config: Arc::new(config.http.clone()),
    };
    let drain_grace = Duration::from_secs(config.drain_grace_secs);
    let mut http = HttpServer::new(move || {
        let state = state.clone();
        App::new()
            .configure(|cfg| mcp_http::configure(cfg, state.clone()))
            .route(
                "/healthz",
                web::get().to(|| async { HttpResponse::Ok().body("ok") }),
            )
            .route("/readyz", web::get().to(readyz))
    })
    .disable_signals()
    // SSE events are small writes that must leave at once; with Nagle a
    // write behind an unacknowledged one waits for the peer's delayed ACK
    // (about 40 ms on Linux), e.g. the end of a cancelled request's stream.
    .tcp_nodelay(true)
    .shutdown_timeout(drain_grace.as_secs().max(1));
    if config.workers > 0 {
        http = http.workers(config.workers);
    }
    let http = http.bind(config.bind)?;
    let addrs = http.addrs();
    Ok(BoundNode {
        server: http.run(),
        runtime,
        addrs,
        drain_grace,
    })
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

/// Forwards the server's events (list changes, resource updates) to every
/// session of the node.
fn forward_events(server: &McpServer, runtime: &Runtime) {
    let mut events = server.subscribe_events();
    let runtime = runtime.clone();
    actix_web::rt::spawn(async move {
        loop {
            match events.recv().await {
                Ok(event) => runtime.broadcast(event),
                Err(RecvError::Lagged(missed)) => tracing::warn!(missed, "Server events dropped."),
                Err(RecvError::Closed) => break,
            }
        }
    });
}
