//! Hosts other MCP servers on a node of the cluster: a stdio server (a
//! program from npm or PyPI, say) runs as one child process per session,
//! started with the client's own `initialize` and ended with the session
//! (a Streamable HTTP server, `urls`, gets one upstream session per session
//! instead, at its replicas in turn);
//! 2026-07-28 requests, which have no session, run on initialized children
//! kept per principal. The relay is an [`mcp_cluster_runtime::McpService`]: the runtime serves
//! its sessions, streams, resumption and cancellation as it serves a
//! provider's own handlers, and the relay carries each request to the
//! session's child and everything the child says back.
//!
//! What crosses: requests and answers with ids mapped (the child sees ids
//! of the relay's own); the child's questions (sampling, elicitation,
//! roots) asked of the client during the request that caused them (outside
//! any, on the session's GET stream; for a 2026-07-28 client, as the
//! request's `input_required` round, the child waiting for the retry's
//! answer on whichever node it runs), and the answers given back; progress under the client's token; a
//! cancellation (the client's, or the request's timeout) to the child
//! running that request only; log lines and list or resource changes to
//! the request's stream or the session's. Children are bounded: no shell,
//! a process group ended as a group, a parent-death signal, stderr always
//! read and rate-limited into the log, stdout lines bounded, counts and
//! starts per second limited.
//!
//! # Layout
//! - [`config`]: [`UpstreamConfig`], one `[[upstreams]]` entry.
//! - [`service`](mod@service): [`RelayService`], the service; its `watch`
//!   module, the children watching resources for 2026-07-28 listen streams.
//! - `upstream`: the conversation with one child.
//! - `child`: the process: start, end, bounded lines.
//! - [`federation`](mod@federation): [`Federation`], several hosted
//!   servers behind one endpoint; `naming`, their names as clients see
//!   them.
//! - `http`: the conversation with a session of an HTTP server (`urls`).
//! - [`keeper`]: between the node and each server, ending the server's
//!   whole process group when the node dies.
//! - `pool`: idle children of 2026-07-28 requests, per principal.
//! - `metrics`: `mcp_upstream_*`.

mod child;
pub mod config;
pub mod federation;
mod http;
pub mod keeper;
mod metrics;
mod naming;
mod pool;
pub mod service;
mod upstream;

pub use config::{ClientCredentials, UpstreamConfig, UpstreamConfigError};
pub use federation::Federation;
pub use service::RelayService;
