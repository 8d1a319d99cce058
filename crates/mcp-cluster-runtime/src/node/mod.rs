//! What the node itself holds, below any MCP request: its settings, its
//! errors, its quotas and the reading of event-log streams.

pub mod config;
pub mod error;
pub mod follow;
pub mod quota;
