//! A provider's binary as the README's "Depending on the crates" shows it:
//! `mcp-cluster` without features, one tool, every flag, variable and
//! configuration key of `mcp-node` (`mcp_cluster::cli`). Configured for
//! Redis, TLS, authorization or trace export, it exits with 64 and a line
//! naming the feature it lacks (tests/features/check.sh).

use std::process::ExitCode;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::protocol::ErrorObject;
use mcp_cluster::protocol::types::CallToolResult;
use mcp_cluster::{McpServer, NodeConfig, RequestContext, ServerBuilder, ToolDef};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    /// Sent back as is.
    message: String,
}

async fn echo(args: Echo, _: RequestContext) -> Result<CallToolResult, ErrorObject> {
    Ok(CallToolResult::text(args.message))
}

fn server(config: &NodeConfig) -> McpServer {
    ServerBuilder::new("bare-provider", env!("CARGO_PKG_VERSION"))
        .page_size(config.page_size)
        .tool(ToolDef::typed("echo", "Echoes the message.", echo))
        .build()
}

fn main() -> ExitCode {
    cli::run(
        Program::new("bare-provider", env!("CARGO_PKG_VERSION")),
        server,
    )
}
