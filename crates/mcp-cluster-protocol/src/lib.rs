//! JSON-RPC 2.0 and Model Context Protocol wire types.
//!
//! This crate owns what travels on the wire and nothing else: it decodes and
//! validates JSON-RPC envelopes, names every MCP method, carries the typed
//! params and results of the session-based revisions (2024-11-05 through
//! 2025-11-25), and states the rules that differ between revisions. It does no
//! I/O; transports live in `mcp-cluster-http` and `mcp-cluster`.
//!
//! # Layout
//! - [`jsonrpc`]: envelopes ([`Message`], [`Request`], [`Notification`],
//!   [`Response`]), [`RequestId`], decoding with precise errors.
//! - [`error`]: JSON-RPC and MCP error codes and [`ErrorObject`].
//! - [`version`]: [`ProtocolVersion`], negotiation, per-revision rules.
//! - [`methods`]: method-name constants.
//! - [`types`]: typed params and results (tools, resources, prompts, ...).

pub mod error;
pub mod jsonrpc;
pub mod methods;
pub mod types;
pub mod version;

pub use error::{ErrorCode, ErrorObject, retry_after_data};
pub use jsonrpc::{DecodeError, Message, Notification, Request, RequestId, Response};
pub use version::ProtocolVersion;
