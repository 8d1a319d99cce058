//! The MCP HTTP transports on actix-web: Streamable HTTP at one endpoint
//! (POST, GET, DELETE) and the legacy HTTP+SSE transport of 2024-11-05.
//!
//! This crate owns the wire rules of HTTP: status codes, headers
//! (`Mcp-Session-Id`, `MCP-Protocol-Version`, `Last-Event-ID`, `Mcp-Method`,
//! `Mcp-Name`, `Mcp-Param-*`), Origin and Host checks, body limits and SSE
//! framing. MCP semantics are the runtime's; this crate turns requests into
//! [`mcp_cluster_runtime::Runtime`] calls and runtime follows into SSE.
//!
//! # Layout
//! - [`address_quota`]: the request rate of clients without a principal,
//!   refused requests included, at the edge.
//! - [`auth`]: bearer tokens at the edge, protected resource metadata.
//! - [`config`]: transport settings ([`HttpConfig`]).
//! - [`connections`]: connection limits, in all and per client address.
//! - [`error`]: [`HttpError`], the one place that picks status codes.
//! - [`forwarded`]: the client's address behind trusted proxies.
//! - [`headers`]: header names and checks.
//! - [`sse`]: SSE framing of followed streams.
//! - [`write_stall`]: SSE streams whose client takes nothing are closed.
//! - [`streamable`]: the Streamable HTTP endpoint.
//! - [`legacy`]: the HTTP+SSE transport (2024-11-05).
//! - [`observe`]: `/metrics`, the access log and `X-Request-Id`.
//! - [`card`]: the server card and its catalog.

pub mod address_quota;
pub mod auth;
pub mod card;
pub mod config;
pub mod connections;
pub mod error;
pub mod forwarded;
pub mod headers;
pub mod legacy;
pub mod observe;
pub mod request_head;
pub mod sse;
mod stateless;
pub mod streamable;
pub mod write_stall;

use std::sync::Arc;

use actix_web::web;
pub use config::HttpConfig;
pub use error::HttpError;
use mcp_cluster_runtime::Runtime;

/// What every handler needs; shared with `web::Data`.
#[derive(Debug, Clone)]
pub struct HttpState {
    /// The node's runtime.
    pub runtime: Runtime,
    /// Transport settings.
    pub config: Arc<HttpConfig>,
    /// The resource server, when authorization is on: every MCP request
    /// then needs a valid bearer token.
    pub auth: Option<Arc<mcp_cluster_auth::Authenticator>>,
    /// The node's connection limits, when it keeps them: long-lived
    /// streams are refused (503) when they would leave too few
    /// connections for requests ([`connections::ConnectionGate::stream_room`]).
    pub connections: Option<Arc<connections::ConnectionGate>>,
    /// The watch that closes SSE streams whose client takes none of their
    /// bytes for `config.sse_write_stall_timeout_secs`. Its scanner
    /// ([`write_stall::StallWatch::run`]) is spawned by whoever builds the
    /// state and stops once every clone of the state is dropped; without it
    /// streams are watched but never closed.
    pub stalls: Arc<write_stall::StallWatch>,
    /// The server card and its catalog, when the node publishes a card.
    pub discovery: Option<Arc<card::Discovery>>,
}

impl HttpState {
    /// Refuses a new long-lived stream when the node's connections are
    /// nearly all taken.
    ///
    /// # Errors
    /// [`HttpError::Unavailable`] (503 with `Retry-After`).
    pub(crate) fn stream_room(&self) -> Result<(), HttpError> {
        match &self.connections {
            Some(gate) if !gate.stream_room() => {
                mcp_cluster_telemetry::metrics::metrics()
                    .connections_refused
                    .with_label_values(&["stream_limit"])
                    .inc();
                Err(HttpError::Unavailable(
                    "this node holds as many streams as its connection limit allows: \
                     try again, or another node",
                ))
            }
            _ => Ok(()),
        }
    }
}

/// Registers the MCP routes (Streamable HTTP endpoint and, when enabled, the
/// legacy HTTP+SSE routes).
pub fn configure(cfg: &mut web::ServiceConfig, state: HttpState) {
    let endpoint = state.config.endpoint.clone();
    let legacy = state.config.legacy_sse;
    let metadata_paths = state
        .auth
        .as_ref()
        .map(|a| a.metadata().paths().to_vec())
        .unwrap_or_default();
    // Validated at start (`NodeConfig::validate`): none trusted otherwise.
    let proxies = forwarded::TrustedProxies::from_config(&state.config).unwrap_or_default();
    let publishes = state.discovery.is_some();
    cfg.app_data(web::Data::new(proxies));
    cfg.app_data(web::Data::new(state));
    card::configure(cfg, &endpoint, publishes);
    for path in metadata_paths {
        cfg.service(web::resource(path).route(web::get().to(auth::metadata)));
    }
    cfg.service(
        web::resource(endpoint)
            .route(web::post().to(streamable::post))
            .route(web::get().to(streamable::get))
            .route(web::delete().to(streamable::delete))
            .default_service(web::to(streamable::method_not_allowed)),
    );
    if legacy {
        cfg.service(web::resource(legacy::SSE_PATH).route(web::get().to(legacy::connect)));
        cfg.service(web::resource(legacy::MESSAGES_PATH).route(web::post().to(legacy::message)));
    }
}
