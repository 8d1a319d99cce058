//! One tool, `greet`, served over Streamable HTTP at `/mcp` (and legacy
//! HTTP+SSE at `/sse`). `cli::run` makes the program a whole node: every
//! flag, variable and configuration key of `mcp-node` applies, so
//! `cargo run -p mcp-cluster-examples --bin greeter -- --bind 127.0.0.1:8080`
//! serves it alone, and `--redis-url` makes it one node of a cluster.

use std::process::ExitCode;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::prelude::*;

/// The provider's state (none here): its methods are the server's tools.
struct Greeter;

#[server(name = "greeter")]
impl Greeter {
    /// Greets someone.
    #[tool]
    async fn greet(
        &self,
        /// Who to greet.
        name: String,
        ctx: &RequestContext,
    ) -> String {
        // A no-op unless the call carries a progressToken.
        ctx.progress(1.0, Some(1.0), None).await.ok();
        // The first message before the result turns the answer into SSE.
        ctx.log(LoggingLevel::Info, None, "greeting".into())
            .await
            .ok();
        format!("Hello, {name}!")
    }
}

fn main() -> ExitCode {
    // Reads the flags, the MCP_* variables and the configuration file,
    // serves until SIGTERM or SIGINT, then drains.
    cli::run(
        Program::new("greeter", env!("CARGO_PKG_VERSION")),
        |config| Greeter.into_builder().page_size(config.page_size).build(),
    )
}
