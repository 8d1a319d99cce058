//! The actor runtime of an MCP node, for both eras of the protocol: the
//! session era (2024-11-05 … 2025-11-25), where one `Session` actor per live
//! session runs one `InFlightRequest` actor per request, and the stateless
//! era (2026-07-28), where each request carries what a session held. Either
//! way a handler runs on the node's request executor, never on an HTTP
//! worker, and gets a [`RequestContext`]: cancellation, progress, logging
//! to the client, and asking the client (sampling, roots, elicitation).
//! Everything a request writes goes through an [`Exchange`]: answered as
//! JSON when the handler emits nothing before its result, as an SSE stream
//! (backed by the event log, or direct for a stateless request) from its
//! first notification on.
//!
//! This crate knows MCP semantics but no HTTP: `mcp-cluster-http` turns requests into
//! [`Runtime`] calls and [`Follow`] streams into SSE; storage is reached only
//! through `mcp-cluster-store` ports.
//!
//! What both eras share is written once, in [`request`]: the executor and
//! `run_job`, the context, the method tables (which methods each era
//! answers, which questions a handler may ask the client), the measuring
//! of a call. Server events reach both eras' listeners through one
//! fan-out (`Runtime::fan_out`): the node's sessions and its
//! `subscriptions/listen` streams.
//!
//! # Layers
//! Each folder uses only the folders of the layers above it in this list
//! (lower layers), never one of its own layer or below: the test
//! `tests/layers.rs` reads this list and the sources and fails on any
//! other `crate::` path.
//! 1. [`node`]: what the node itself holds, below any MCP request: its
//!    settings ([`RuntimeConfig`]), errors, quotas, the state every part
//!    shares (`NodeContext`: store, counters, drain), the reading of
//!    event-log streams ([`Follow`]) and the registry both eras keep what
//!    they hold open in (bounded, left on stop, one fan-out, swept).
//! 2. [`request`]: the one request path of both eras: the request executor
//!    every handler runs on, the request actor and `run_job` (timeout,
//!    cancellation, panics), the [`RequestContext`] handed to handlers, the
//!    [`Exchange`] a request writes to, the measuring of a call, the
//!    method tables, and [`McpService`], what a provider implements.
//! 3. [`session`], [`stateless`]: the two eras, side by side and unaware of
//!    each other. `session`: the session actor, [`SessionHandle`] and the
//!    sessions' side of the registry (2024-11-05 … 2025-11-25).
//!    `stateless`: 2026-07-28 requests, `subscriptions/listen` (the
//!    listen streams' side of the registry),
//!    input-required round trips (`mrtr`) and tasks.
//! 4. [`runtime`]: [`Runtime`], the facade transports call, joining both
//!    eras: the inbound pipeline every transport hands bodies to, and the
//!    node's cluster duties (control bus, heartbeats, orphans).

pub mod node;
pub mod request;
pub mod runtime;
pub mod session;
pub mod stateless;

pub use node::config::{ResponseMode, RuntimeConfig};
pub use node::error::{NodeFull, RuntimeError};
pub use node::follow::{Follow, FollowEnd, FollowItem};
pub use node::quota::{Quota, QuotaConfig};
pub use request::call::{
    BodyBytes, BodyHold, CallerToken, Inbound, SMALL_BODY_BYTES, Transport, known_client_method,
};
pub use request::context::{AskError, Caller, NamedInput, RequestContext};
pub use request::exchange::{Exchange, ExchangeReply};
pub use request::link::{HostedEnd, MAX_SESSION_ASKS, SessionLink};
pub use request::service::{
    MAX_HANDOVER_BYTES, McpService, MirroredParam, OpenError, ResourceWatch, ServerEvent,
    SessionAdopt, SessionOpen, TaskSupport, Watching,
};
pub use runtime::Runtime;
pub use runtime::pipeline::{Answers, Refusal, Submitted};
pub use session::{Placed, SessionHandle};
pub use stateless::{RequestGuard, RequestMeta, StatelessReply};
