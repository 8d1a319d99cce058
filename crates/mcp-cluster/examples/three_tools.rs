//! Three tools written with the attribute macros, as `proto-docs/provider-api.md`
//! shows them beside rmcp's: typed output, `?` on errors, the request context.
//! `cargo run -p mcp-cluster --example three_tools -- --bind 127.0.0.1:8080`

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::prelude::*;

struct Tools;

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Sum {
    sum: f64,
}

#[server]
impl Tools {
    /// Adds two numbers.
    #[tool(read_only)]
    async fn add(&self, a: f64, b: f64) -> Json<Sum> {
        Json(Sum { sum: a + b })
    }

    /// Reads a UTF-8 text file.
    #[tool(blocking, time_limit = "10s")]
    fn read_file(
        &self,
        /// Absolute path.
        path: PathBuf,
    ) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }

    /// Counts down, one step a second, reporting progress; stops when cancelled.
    #[tool]
    async fn countdown(&self, from: u32, ctx: &RequestContext) -> Result<String, HandlerError> {
        for done in 1..=from {
            tokio::select! {
                () = ctx.cancelled() => return Err(HandlerError::tool("cancelled")),
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            ctx.progress(done.into(), Some(from.into()), None).await?;
        }
        Ok("liftoff".into())
    }
}

fn main() -> ExitCode {
    let program = Program::new("three-tools", "1.0.0");
    cli::run(program, |_| Tools.into_server())
}
