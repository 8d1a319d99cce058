//! Running a server as a node: Streamable HTTP (and legacy HTTP+SSE) on the
//! embedded store, health endpoints, and a drain on SIGTERM / SIGINT.
//!
//! Drain: readiness goes false, new sessions are refused, every SSE
//! connection ends with `retry` (clients reconnect, elsewhere behind a load
//! balancer), in-flight requests get `drain_grace_secs`, then the rest are
//! cancelled and the process exits.

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
        actix_web::rt::spawn(async move {
            shutdown.await;
            // 1. Readiness fails and no new session starts here; requests of
            //    existing sessions are still served.
            tracing::info!(in_flight = runtime.in_flight(), "Draining.");
            runtime.start_drain();
            // 2. Running requests get the grace period to finish.
            let deadline = tokio::time::Instant::now() + grace;
            while runtime.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(DRAIN_POLL).await;
            }
            // 3. What still runs answers -32603 into its stream.
            if runtime.in_flight() > 0 {
                tracing::warn!(
                    in_flight = runtime.in_flight(),
                    "Grace period over; stopping requests."
                );
                runtime.stop_requests();
                tokio::time::sleep(DRAIN_POLL).await;
            }
            // 4. SSE connections end with `retry`; clients resume from the
            //    log on another node. Then the listener closes.
            runtime.close_streams();
            handle.stop(true).await;
            runtime.leave().await;
            tracing::info!("Drained.");
        });
        self.server.await
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
