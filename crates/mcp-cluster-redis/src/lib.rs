//! Redis implementations of the `mcp-cluster-store` ports, so the nodes of a cluster
//! share sessions, event logs, a control bus, a node registry, quotas and
//! tasks.
//!
//! [`connect`] builds a node's [`mcp_cluster_store::Store`] on a fixed set of
//! Redis connections, whatever the load: a multiplexed command connection
//! (a `ConnectionManager`) per thread that sends commands, driven on that
//! thread, and one pub/sub connection owned by a task (every stream wake-up
//! and the control bus). None grows with the number of sessions, streams or
//! SSE readers. All reconnect by themselves; while Redis is away every call
//! fails within the command timeout with
//! [`mcp_cluster_store::StoreError::Unavailable`].
//!
//! Key layout and retention are documented in [`keys`] and [`event_log`].
//! The runtime, HTTP and orphan finalization live elsewhere (`mcp-cluster-runtime`,
//! `mcp-cluster-http`); this crate only stores.
//!
//! # Layout
//! - [`connect`] (in `connection`): the connections and the store bundle.
//! - [`config`]: the [`RedisConfig`] and [`RedisRetention`].
//! - [`keys`]: every key and channel name.
//! - [`event_log`]: the [`RedisEventLog`], Redis Streams driven by Lua scripts.
//! - [`session_store`]: the [`RedisSessionStore`].
//! - `layout`: following a Redis Cluster's layout (which member serves
//!   which slots), so that no connection stays with a member that left.
//! - `lease`: session leases, so the node serving a session need not read it
//!   per request.
//! - [`bus`]: the [`RedisBus`], one control channel.
//! - [`nodes`]: the [`RedisNodes`] registry: heartbeats, orphan claims.
//! - [`quota`]: the [`RedisQuotas`]: rate counters and lease sets.
//! - [`tasks`]: the [`RedisTasks`]: task records, answers, cancel flags.
//! - `pubsub`: the node's one pub/sub connection and its task.
//! - `clock`: Redis's time in scripts, the clock every node shares.
//! - [`error`]: [`ClusterError`] and the mapping onto `StoreError`.
//!
//! Everything but [`config`], [`keys`] and [`ClusterError`] needs the `client`
//! feature (on by default): the Redis client itself.

#[cfg(feature = "client")]
pub mod bus;
#[cfg(feature = "client")]
mod clock;
pub mod config;
#[cfg(feature = "client")]
mod connection;
pub mod error;
#[cfg(feature = "client")]
pub mod event_log;
pub mod keys;
#[cfg(feature = "client")]
mod layout;
#[cfg(feature = "client")]
mod lease;
#[cfg(feature = "client")]
pub mod nodes;
#[cfg(feature = "client")]
mod pubsub;
#[cfg(feature = "client")]
pub mod quota;
#[cfg(feature = "client")]
mod replica_wait;
#[cfg(feature = "client")]
mod reply;
#[cfg(feature = "client")]
pub mod session_store;
#[cfg(feature = "client")]
pub mod target;
#[cfg(feature = "client")]
pub mod tasks;

#[cfg(feature = "client")]
pub use bus::RedisBus;
pub use config::{RedisConfig, RedisRetention};
#[cfg(feature = "client")]
pub use connection::connect;
pub use error::ClusterError;
#[cfg(feature = "client")]
pub use event_log::RedisEventLog;
pub use keys::Keys;
#[cfg(feature = "client")]
pub use nodes::RedisNodes;
#[cfg(feature = "client")]
pub use quota::RedisQuotas;
#[cfg(feature = "client")]
pub use session_store::RedisSessionStore;
#[cfg(feature = "client")]
pub use target::Target;
#[cfg(feature = "client")]
pub use tasks::RedisTasks;
