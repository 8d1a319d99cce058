//! `mcp-node`: one node of an MCP server cluster, serving the built-in
//! tools, resources and prompts. Everything else (flags, variables, the
//! configuration file, logs, traces, serving and draining) is
//! [`mcp_cluster::cli::run`], which a provider's own binary calls the same
//! way around its own server.
//!
//! Exit codes: 0 after a clean drain, 64 for bad configuration, 1 when
//! serving failed.

mod builtins;
mod input_fixtures;
mod revision_fixtures;
mod task_fixtures;

use std::process::ExitCode;

use mcp_cluster::cli::{self, Program};

/// mimalloc: the request path allocates many small short-lived objects
/// (JSON values, futures, actor contexts); measured faster than glibc malloc
/// under load (see the issue notes / PERFORMANCE figures).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let program = Program::new("mcp-node", env!("CARGO_PKG_VERSION"))
        .about("One node of an MCP server cluster.");
    cli::run(program, |config| builtins::server(config.page_size))
}
