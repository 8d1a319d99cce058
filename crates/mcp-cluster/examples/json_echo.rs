//! The ceiling for benchmarks: a bare actix-web server that parses a
//! JSON-RPC request body and echoes a JSON-RPC result, with no MCP logic.
//! `cargo run --release -p mcp-cluster --example json_echo -- 127.0.0.1:18090 1`
//! (address, workers).

use actix_web::{App, HttpResponse, HttpServer, web};
use serde_json::{Value, json};

async fn echo(body: web::Bytes) -> HttpResponse {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return HttpResponse::BadRequest().finish();
    };
    let response = json!({"jsonrpc": "2.0", "id": request["id"], "result": {"content": [{"type": "text", "text": request["params"]["arguments"]["message"]}]}});
    HttpResponse::Ok()
        .content_type("application/json")
        .body(response.to_string())
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:18090".into());
    let workers: usize = args.next().and_then(|w| w.parse().ok()).unwrap_or(1);
    actix_web::rt::System::new().block_on(async move {
        HttpServer::new(|| App::new().route("/mcp", web::post().to(echo)))
            .workers(workers)
            .bind(addr)?
            .run()
            .await
    })
}
