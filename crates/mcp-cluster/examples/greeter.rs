//! One tool, `greet`, served over Streamable HTTP at `/mcp` (and legacy
//! HTTP+SSE at `/sse`): `cargo run -p mcp-cluster --example greeter [ADDRESS]`,
//! where ADDRESS defaults to 127.0.0.1:8080 (127.0.0.1:0 picks a free port).

use mcp_cluster::prelude::*;
use mcp_cluster::{NodeConfig, node};

/// The provider's state (none here): its methods are the server's tools.
struct Greeter;

#[server(name = "greeter", version = "1.0.0")]
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

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let mut config = NodeConfig::default();
    if let Some(address) = std::env::args().nth(1) {
        config.bind = address.parse().map_err(std::io::Error::other)?;
    }
    let endpoint = config.http.endpoint.clone();
    let node = node::bind(Greeter.into_server(), config).await?;
    for address in node.addrs() {
        println!("greeter listening on http://{address}{endpoint}");
    }
    node.run().await // serves until SIGTERM or SIGINT, then drains
}
