//! Build MCP servers in Rust and run them as cluster nodes.
//!
//! A provider describes tools, resources, prompts and completions with
//! [`ServerBuilder`]; the resulting [`McpServer`] is the
//! [`mcp_cluster_runtime::McpService`] the runtime calls. [`node`] runs it over
//! Streamable HTTP (plus the legacy HTTP+SSE transport) on the embedded
//! store; [`stdio`] runs the same server over standard input and output.
//!
//! ```no_run
//! use mcp_cluster::{ServerBuilder, ToolDef};
//! use mcp_cluster_protocol::types::CallToolResult;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Echo { message: String }
//!
//! let server = ServerBuilder::new("example", "1.0.0")
//!     .tool(ToolDef::typed("echo", "Echoes its input", |args: Echo, _ctx| async move {
//!         Ok(CallToolResult::text(args.message))
//!     }))
//!     .build();
//! ```
//!
//! # Layout
//! - [`server`]: [`McpServer`], [`ServerBuilder`], request dispatch.
//! - [`tool`], [`resource`], [`prompt`]: definitions and their handlers.
//! - [`cursor`]: stateless pagination cursors.
//! - [`uri_template`]: matching resource template URIs.
//! - [`config`]: the node's composed configuration.
//! - [`node`], [`stdio`]: running a server.
//! - `tls`: the node's HTTPS certificate, reloaded when its files change
//!   (feature `tls`).
//!
//! # Features
//! All off by default; `full` turns on every one (the `mcp-node` binary has
//! them all). A binary configured for one it lacks exits at start with
//! code 64 and a line naming the feature.
//! - `redis`: the Redis store, for nodes sharing sessions (a cluster).
//! - `otlp`: traces exported over OTLP/HTTP.
//! - `tls`: HTTPS on the main listener.
//! - `auth`: OAuth 2.1 bearer tokens (JWTs, introspection).

pub mod cli;
pub mod config;
pub mod cursor;
mod features;
pub mod node;
pub mod prompt;
pub mod resource;
pub mod server;
pub mod stdio;
#[cfg(feature = "tls")]
pub mod tls;
pub mod tool;
pub mod uri_template;

pub use config::NodeConfig;
pub use mcp_cluster_protocol as protocol;
pub use mcp_cluster_runtime::{AskError, RequestContext, ServerEvent, TaskSupport};
pub use prompt::PromptDef;
pub use resource::{ResourceDef, TemplateDef};
pub use server::{McpServer, ServerBuilder};
pub use tool::ToolDef;
