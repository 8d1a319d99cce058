//! One tool, `greet`, served over Streamable HTTP at `/mcp` (and legacy
//! HTTP+SSE at `/sse`). `cli::run` makes the program a whole node: every
//! flag, variable and configuration key of `mcp-node` applies, so
//! `cargo run -p mcp-cluster-examples --bin greeter -- --bind 127.0.0.1:8080`
//! serves it alone, and `--redis-url` makes it one node of a cluster.

use std::process::ExitCode;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::protocol::ErrorObject;
use mcp_cluster::protocol::types::{CallToolResult, LoggingLevel};
use mcp_cluster::{McpServer, NodeConfig, RequestContext, ServerBuilder, ToolDef};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
}

async fn greet(args: Greet, ctx: RequestContext) -> Result<CallToolResult, ErrorObject> {
    // A no-op unless the call carries a progressToken.
    ctx.progress(1.0, Some(1.0), None).await.ok();
    // The first message before the result turns the answer into SSE.
    ctx.log(LoggingLevel::Info, None, "greeting".into())
        .await
        .ok();
    Ok(CallToolResult::text(format!("Hello, {}!", args.name)))
}

fn server(config: &NodeConfig) -> McpServer {
    ServerBuilder::new("greeter", env!("CARGO_PKG_VERSION"))
        .page_size(config.page_size)
        .tool(ToolDef::typed("greet", "Greets someone.", greet))
        .build()
}

fn main() -> ExitCode {
    // Reads the flags, the MCP_* variables and the configuration file,
    // serves until SIGTERM or SIGINT, then drains.
    cli::run(Program::new("greeter", env!("CARGO_PKG_VERSION")), server)
}
