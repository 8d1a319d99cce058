//! Peer for `loadtest/peers/compare.sh`: a minimal MCP echo server on the
//! official Rust SDK (`rmcp`, Streamable HTTP over axum), with the SDK's
//! default stateful session manager and default server config.
//!
//! `rmcp-echo ADDR [WORKERS] [stateless]` (or env `WORKERS`). One worker
//! runs a current-thread runtime, the same shape as `mcp-node --workers 1`,
//! so the whole server lives on the one core it is pinned to.
//!
//! `stateless`: rmcp's stateless mode (`legacy_session_mode = false`): no
//! sessions, each POST served on its own, answered with a JSON body
//! (`json_response = true`, the mode's fast path that rmcp documents for
//! plain request and response tools).

use std::sync::Arc;

use axum::serve::ListenerExt;
use rmcp::{
    ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{ServerCapabilities, ServerConfig},
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    message: String,
}

#[derive(Debug, Clone)]
struct Echo {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Echo {
    #[tool(description = "Returns its message as text content")]
    fn echo(&self, Parameters(EchoArgs { message }): Parameters<EchoArgs>) -> String {
        message
    }
}

// Calls go through the router the session holds, rather than one built per
// call (the macro's default), so rmcp is measured on its faster documented path.
#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:18520".into());
    let workers: usize = args
        .next()
        .or_else(|| std::env::var("WORKERS").ok())
        .and_then(|w| w.parse().ok())
        .unwrap_or(1);
    let stateless = args.next().is_some_and(|mode| mode == "stateless");
    let runtime = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()?
    };
    runtime.block_on(async move {
        // One router, built once; each session gets a clone (its routes and
        // schemas are behind Arcs, so the clone is shallow).
        let tool_router = Echo::tool_router();
        // Defaults throughout (the in-memory session manager, stateful
        // sessions, SSE response bodies, the loopback Host allowlist) but
        // for the stateless mode's two settings.
        let mut config = StreamableHttpServerConfig::default();
        if stateless {
            config.legacy_session_mode = false;
            config.json_response = true;
        }
        let service = StreamableHttpService::new(
            move || {
                Ok(Echo {
                    tool_router: tool_router.clone(),
                })
            },
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let app = axum::Router::new().nest_service("/mcp", service);
        // TCP_NODELAY, as actix-web, hyper-floor and Node set it: the SSE
        // reply goes out in several small writes, and with Nagle's algorithm
        // on, each tools/call waits out the client's delayed ACK (~40 ms).
        let listener = tokio::net::TcpListener::bind(&addr).await?.tap_io(|tcp| {
            // A socket that refuses the option is only slower.
            let _ = tcp.set_nodelay(true);
        });
        let mode = if stateless { "stateless" } else { "stateful" };
        println!("rmcp-echo ({mode}) listening on http://{addr}/mcp");
        axum::serve(listener, app).await
    })
}
