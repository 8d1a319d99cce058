//! The actor runtime of an MCP node.
//!
//! A [`SessionRegistry`](registry) supervises one `Session` actor per live
//! session; each session runs one `InFlightRequest` actor per request. A
//! request's handler gets a [`RequestContext`]: cancellation, progress,
//! logging to the client, and asking the client (sampling, roots,
//! elicitation). Everything a request writes goes through an [`Exchange`]:
//! answered as JSON when the handler emits nothing before its result, as an
//! SSE stream (backed by the event log) from its first notification on.
//!
//! This crate knows MCP semantics but no HTTP: `mcp-cluster-http` turns requests into
//! [`Runtime`] calls and [`Follow`] streams into SSE; storage is reached only
//! through `mcp-cluster-store` ports.
//!
//! # Layout
//! - [`runtime`]: [`Runtime`], the facade transports call.
//! - [`registry`]: the session registry actor and its concurrent lookup map.
//! - [`session`]: the session actor and [`SessionHandle`].
//! - `request`: the in-flight request actor.
//! - [`context`]: [`RequestContext`] handed to handlers.
//! - [`exchange`]: the output of one POST (JSON or SSE).
//! - [`follow`]: replaying and tailing one stream of the event log.
//! - [`pipeline`]: the one path every transport hands decoded bodies to.
//! - [`service`]: [`McpService`], what a provider implements.
//! - [`cluster`]: control-bus handling, heartbeats, orphan finalization.
//! - [`quota`]: quotas per client address and per principal.
//! - [`config`], [`error`]: settings and errors.

pub mod node;
pub mod request;
pub mod runtime;
pub mod session;
pub mod stateless;

pub use node::{config, error, follow, quota};
pub(crate) use request::executor;
pub use request::{context, exchange, service};
pub use runtime::{cluster, pipeline};
pub use session::registry;
pub use stateless::{listen, mrtr, tasks};

pub use config::{ResponseMode, RuntimeConfig};
pub use context::{AskError, NamedInput, RequestContext};
pub use error::RuntimeError;
pub use exchange::{Exchange, ExchangeReply};
pub use follow::{Follow, FollowEnd, FollowItem};
pub use pipeline::{Answers, Inbound, Refusal, Submitted, Transport};
pub use quota::{Quota, QuotaConfig};
pub use runtime::Runtime;
pub use service::{McpService, MirroredParam, ServerEvent, TaskSupport};
pub use session::SessionHandle;
pub use stateless::{RequestGuard, RequestMeta, StatelessReply};
