//! The OAuth 2.1 resource server of an MCP node (MCP authorization,
//! 2025-06-18 and 2025-11-25): bearer access tokens validated on every
//! HTTP request, as JWTs signed by a configured issuer's published keys or
//! through RFC 7662 introspection, and the protected resource metadata
//! (RFC 9728) that tells clients where to get them.
//!
//! This crate knows no HTTP server: the transports hand it the
//! `Authorization` header and turn its answers into 401, 403 and 503. It
//! never forwards a token anywhere: tokens go to no one but the issuer's
//! introspection endpoint, and handlers see only the [`Principal`].
//!
//! # Layout
//! - [`config`]: [`AuthConfig`], validated once.
//! - [`authenticator`]: [`Authenticator`], header to principal.
//! - [`bearer`]: the `Bearer` credential of an `Authorization` header.
//! - `issuer`: discovery and key caching per authorization server.
//! - `introspection_budget`: which introspection calls a node makes (per
//!   address, in all, and the reserve for addresses in good standing).
//! - `negative_cache`: introspection answers that refused a token.
//! - [`metadata`]: [`ResourceMetadata`] and `WWW-Authenticate` challenges.
//! - [`error`]: [`AuthError`], [`Rejection`].
//! - `verify`: signatures checked with ring.
//!
//! Token validation needs the `verify` feature (on by default): without it
//! the settings are read and checked, and [`Authenticator::new`] refuses.

#[cfg(feature = "verify")]
pub mod authenticator;
/// [`Authenticator`] of a build without token validation: it cannot be made.
#[cfg(not(feature = "verify"))]
#[path = "unbuilt.rs"]
pub mod authenticator;
pub mod bearer;
pub mod config;
pub mod error;
#[cfg(feature = "verify")]
mod introspection_budget;
#[cfg(feature = "verify")]
mod issuer;
pub mod metadata;
#[cfg(feature = "verify")]
mod negative_cache;
#[cfg(feature = "verify")]
mod verify;

pub use authenticator::Authenticator;
pub use config::{AuthConfig, ConfigError, IntrospectionConfig};
pub use error::{AuthError, Rejection};
pub use mcp_cluster_store::Principal;
pub use metadata::{ResourceMetadata, WELL_KNOWN};
