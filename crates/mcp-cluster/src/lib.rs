//! Build MCP servers in Rust and run them as cluster nodes.
//!
//! A provider writes its tools, resources and prompts as methods of a type
//! that holds its state, in an `impl` block marked [`macro@server`]
//! ([`provider`] explains the attributes), or describes them one by one
//! with [`ServerBuilder`] (tools known only at run time; the two mix). The
//! resulting [`McpServer`] is the
//! [`mcp_cluster_runtime::McpService`] the runtime calls. [`node`] runs it over
//! Streamable HTTP (plus the legacy HTTP+SSE transport) on the embedded
//! store; [`stdio`] runs the same server over standard input and output.
//!
//! ```no_run
//! use mcp_cluster::prelude::*;
//!
//! struct Notes;
//!
//! #[server(name = "notes")]
//! impl Notes {
//!     /// Echoes its input.
//!     #[tool]
//!     async fn echo(&self, message: String) -> String {
//!         message
//!     }
//! }
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Shout { text: String }
//!
//! // A tool defined at run time, beside the methods.
//! let server = Notes
//!     .into_builder()
//!     .tool(ToolDef::typed("shout", "Upper-cases its input", |args: Shout, _ctx| async move {
//!         Ok(CallToolResult::text(args.text.to_uppercase()))
//!     }))
//!     .build();
//! ```
//!
//! # Layout
//! - [`provider`]: what `#[server]` generates code against: [`Provider`],
//!   [`Json`], [`Args`], [`HandlerError`].
//! - [`server`](mod@server): [`McpServer`], [`ServerBuilder`], request dispatch.
//! - [`tool`](mod@tool), [`resource`](mod@resource), [`prompt`](mod@prompt):
//!   definitions and their handlers.
//! - [`cursor`]: stateless pagination cursors.
//! - [`uri_template`]: matching resource template URIs.
//! - [`config`]: the node's composed configuration.
//! - [`node`], [`stdio`]: running a server.
//! - [`served`](mod@served): [`Served`], what a node serves: an [`McpServer`],
//!   or another MCP server hosted through [`RelayService`]
//!   (`[[upstreams]]`).
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

// The attribute macros name `::mcp_cluster`, also in this crate's tests.
#[cfg(test)]
extern crate self as mcp_cluster;

mod card;
pub mod cli;
pub mod config;
pub mod cursor;
mod features;
pub mod node;
pub mod prompt;
pub mod provider;
pub mod resource;
pub mod served;
pub mod server;
pub mod skill;
pub mod stdio;
#[cfg(feature = "tls")]
pub mod tls;
pub mod tool;
pub mod uri_template;

pub use config::NodeConfig;
pub use mcp_cluster_macros::{prompt, resource, server, tool};
pub use mcp_cluster_protocol as protocol;
pub use mcp_cluster_relay::{RelayService, UpstreamConfig};
pub use mcp_cluster_runtime::{AskError, RequestContext, ServerEvent, TaskSupport};
pub use mcp_cluster_store::Principal;
pub use prompt::PromptDef;
#[doc(hidden)]
pub use provider::__private;
pub use provider::{Args, HandlerError, Json, Provider};
pub use resource::{ResourceDef, TemplateDef};
pub use served::Served;
pub use server::{McpServer, ServerBuilder};
pub use skill::{SkillDef, SkillError, skills_in};
pub use tool::ToolDef;

/// What a provider's program needs in one `use mcp_cluster::prelude::*`.
pub mod prelude {
    pub use crate::protocol::ErrorObject;
    pub use crate::protocol::types::{CallToolResult, LoggingLevel};
    pub use crate::{
        Args, HandlerError, Json, McpServer, Provider, RequestContext, ServerBuilder, ToolDef,
        prompt, resource, server, tool,
    };
}
