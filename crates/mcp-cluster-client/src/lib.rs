//! A Streamable HTTP MCP client for tests, tools and the load generator.
//!
//! It speaks the transport, not a particular server: POST a message and get
//! JSON, an SSE stream or 202; open the standalone GET stream; resume any
//! stream with `Last-Event-ID`; DELETE the session. It never hides what the
//! server did on the wire, so tests can assert status codes and headers.
//!
//! # Layout
//! - [`sse`]: an incremental SSE parser and an event stream over HTTP.
//! - [`client`]: [`Client`], sessions and requests.
//! - [`http`]: [`HttpOptions`], the HTTP client's CA, token and headers.

pub mod client;
pub mod http;
pub mod sse;

pub use client::{BearerSource, Client, ClientError, Reply, session_id_of};
pub use http::HttpOptions;
pub use sse::{SseEvent, SseParser, SseStream};
