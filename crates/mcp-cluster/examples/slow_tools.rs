//! Tools that misbehave the ways a provider's code can: one declared
//! blocking, one that blocks its thread without saying so, one that spins
//! the CPU, and one with a concurrency and a time limit; beside `echo`.
//! Every flag, variable and config key of `mcp-node` applies
//! (`mcp_cluster::cli`): `cargo run -p mcp-cluster --example slow_tools --
//! --bind 127.0.0.1:8080 --workers 1`. The test
//! `tests/tests/handlers_off_http_workers.rs` runs it to show that none of
//! them delays anyone else's session.

use std::process::ExitCode;
use std::time::Duration;

use tokio::time::Instant;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::protocol::ErrorObject;
use mcp_cluster::protocol::types::CallToolResult;
use mcp_cluster::{McpServer, NodeConfig, RequestContext, ServerBuilder, ToolDef};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// Sent back as is.
    message: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Millis {
    /// How long, in milliseconds (at most 10000).
    ms: u64,
}

fn duration(args: &Millis) -> Duration {
    Duration::from_millis(args.ms.min(10_000))
}

type Outcome = Result<CallToolResult, ErrorObject>;

async fn echo(args: Echo, _: RequestContext) -> Outcome {
    Ok(CallToolResult::text(args.message))
}

/// Blocks its thread; declared so (`.blocking()`).
async fn sleep_blocking(args: Millis, _: RequestContext) -> Outcome {
    std::thread::sleep(duration(&args));
    Ok(CallToolResult::text(format!("slept {} ms", args.ms)))
}

/// Blocks its thread without saying so.
async fn block_thread(args: Millis, _: RequestContext) -> Outcome {
    std::thread::sleep(duration(&args));
    Ok(CallToolResult::text(format!("blocked {} ms", args.ms)))
}

/// Computes without a single await.
async fn spin(args: Millis, _: RequestContext) -> Outcome {
    let until = Instant::now() + duration(&args);
    let mut turns: u64 = 0;
    while Instant::now() < until {
        turns = std::hint::black_box(turns.wrapping_add(1));
    }
    Ok(CallToolResult::text(format!("spun {} ms", args.ms)))
}

/// Waits (asynchronously); one call at a time, for at most a second.
async fn limited(args: Millis, _: RequestContext) -> Outcome {
    tokio::time::sleep(duration(&args)).await;
    Ok(CallToolResult::text(format!("waited {} ms", args.ms)))
}

fn server(config: &NodeConfig) -> McpServer {
    ServerBuilder::new("slow-tools", env!("CARGO_PKG_VERSION"))
        .page_size(config.page_size)
        .tool(ToolDef::typed("echo", "Echoes the message.", echo))
        .tool(
            ToolDef::typed(
                "sleep_blocking",
                "Blocks its thread for ms; declared blocking.",
                sleep_blocking,
            )
            .blocking(),
        )
        .tool(ToolDef::typed(
            "block_thread",
            "Blocks its thread for ms, undeclared.",
            block_thread,
        ))
        .tool(ToolDef::typed("spin", "Keeps a CPU busy for ms.", spin))
        .tool(
            ToolDef::typed(
                "limited",
                "Waits ms; one call at a time, a second at most.",
                limited,
            )
            .max_concurrent(1)
            .time_limit(Duration::from_secs(1)),
        )
        .build()
}

fn main() -> ExitCode {
    cli::run(
        Program::new("slow-tools", env!("CARGO_PKG_VERSION")),
        server,
    )
}
