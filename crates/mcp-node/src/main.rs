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
use std::time::Duration;

use mcp_cluster::cli::{self, Program};

/// mimalloc: the request path allocates many small short-lived objects
/// (JSON values, futures, actor contexts); measured faster than glibc malloc
/// under load (see the issue notes / PERFORMANCE figures).
///
/// The `system-allocator` feature leaves the system's in its place, for heap
/// profilers (see `loadtest/peers/allocations.sh`).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How often [`purge_heartbeat`] frees a block.
const PURGE_HEARTBEAT: Duration = Duration::from_secs(1);

/// Size of the block [`purge_heartbeat`] allocates: above mimalloc's largest
/// "large" object (512 KiB), so the block has a page of its own.
const PURGE_HEARTBEAT_BYTES: usize = 1 << 20;

/// Lets a quiet node give back the memory it freed.
///
/// mimalloc returns freed pages to the system after its purge delay (1 s by
/// default) but only checks that delay when it frees a page again: a node
/// that goes quiet after a burst (sessions passivated, streams closed) would
/// keep that memory until its next burst. Freeing a block that has a page of
/// its own is such a check, so a thread that does it every second returns
/// what is due within about two seconds. Purging at once instead
/// (`MIMALLOC_PURGE_DELAY=0`) keeps about 2 KB less per idle session with a
/// stream but costs 11-16 % more CPU per `tools/call` answer, every burst
/// of frees paying its page faults again (PERFORMANCE.md, "What the
/// allocator keeps of an idle stream").
fn purge_heartbeat() {
    loop {
        std::thread::sleep(PURGE_HEARTBEAT);
        // black_box: an allocation nothing reads could be optimised away.
        drop(std::hint::black_box(Vec::<u8>::with_capacity(
            PURGE_HEARTBEAT_BYTES,
        )));
    }
}

fn main() -> ExitCode {
    // Without it the node still works; only its idle memory stays higher.
    if let Err(err) = std::thread::Builder::new()
        .name("purge-heartbeat".into())
        .stack_size(64 * 1024)
        .spawn(purge_heartbeat)
    {
        eprintln!("mcp-node: no allocator heartbeat thread: {err}");
    }
    let program = Program::new("mcp-node", env!("CARGO_PKG_VERSION"))
        .about("One node of an MCP server cluster.");
    cli::run(program, |config| builtins::server(config.page_size))
}
