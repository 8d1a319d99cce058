//! A server may end a request's SSE stream before its first progress (a
//! draining node does, when the drain comes as the first event is written);
//! the client resumes it with `Last-Event-ID`. The load generator must do
//! so in every operation: `cancel_call` once counted such a close as a lost
//! response (`protocol:missing_response`, the rolling restart's occasional
//! failure in CI). Here a small server closes every call's stream after its
//! priming event and serves the rest on the resumption.

use std::net::SocketAddr;
use std::process::Command;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use mcp_cluster_testkit::loadtest_binary;
use serde_json::{Value, json};

/// SSE events: `(id, data)`.
fn sse(events: &[(String, String)]) -> HttpResponse {
    let mut body = String::from("retry: 10\n\n");
    for (id, data) in events {
        body.push_str(&format!("id: {id}\ndata: {data}\n\n"));
    }
    HttpResponse::Ok()
        .insert_header(("content-type", "text/event-stream"))
        .body(body)
}

async fn post(body: web::Json<Value>) -> HttpResponse {
    let message = body.into_inner();
    let Some(id) = message.get("id").cloned() else {
        return HttpResponse::Accepted().finish();
    };
    match message["method"].as_str() {
        Some("initialize") => HttpResponse::Ok()
            .insert_header(("mcp-session-id", "early-close"))
            .json(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "early-close", "version": "1"}}})),
        // The call's stream: its priming event, then the end.
        Some("tools/call") => sse(&[(format!("call-{id}.0"), String::new())]),
        _ => HttpResponse::Ok().json(json!({"jsonrpc": "2.0", "id": id, "result": {}})),
    }
}

/// The resumption of a call's stream: both progress events and the answer.
async fn get(req: HttpRequest) -> HttpResponse {
    let last = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let Some(id) = last
        .strip_prefix("call-")
        .and_then(|rest| rest.strip_suffix(".0"))
        .and_then(|id| id.parse::<i64>().ok())
    else {
        return HttpResponse::MethodNotAllowed().finish();
    };
    let progress = |n: u64| {
        json!({"jsonrpc": "2.0", "method": "notifications/progress",
               "params": {"progressToken": id, "progress": n, "total": 2}})
        .to_string()
    };
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {
        "content": [{"type": "text", "text": "Long running operation completed"}]}});
    sse(&[
        (format!("call-{id}.1"), progress(1)),
        (format!("call-{id}.2"), progress(2)),
        (format!("call-{id}.3"), answer.to_string()),
    ])
}

/// The server on a thread of its own, on a free loopback port.
fn serve() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let system = actix_web::rt::System::new();
        let server = HttpServer::new(|| {
            App::new()
                .route("/mcp", web::post().to(post))
                .route("/mcp", web::get().to(get))
                .route("/mcp", web::delete().to(HttpResponse::Ok))
        })
        .workers(1)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .unwrap();
        tx.send(server.addrs()[0]).unwrap();
        system.block_on(server.run()).unwrap();
    });
    rx.recv().unwrap()
}

#[test]
fn a_cancel_call_whose_stream_closes_before_its_first_progress_is_resumed_not_lost() {
    let addr = serve();
    let dir = std::env::temp_dir().join(format!("mcp-early-close-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = dir.join("cancel.toml");
    std::fs::write(
        &scenario,
        "name = \"cancel\"\nprotocol_version = \"2025-11-25\"\n\n[[operation]]\n\
         kind = \"cancel_call\"\nweight = 1\nduration_ms = 1000\nsteps = 2\n",
    )
    .unwrap();
    let report = dir.join("report.json");
    let status = Command::new(loadtest_binary())
        .args(["run", "--url", &format!("http://{addr}/mcp"), "--scenario"])
        .arg(&scenario)
        .args([
            "--sessions",
            "2",
            "--ramp-up",
            "0",
            "--duration",
            "1",
            "--report",
        ])
        .arg(&report)
        .status()
        .unwrap();
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(report["total_failed"], 0, "{}", report["errors"]);
    assert_eq!(report["protocol_violations"], 0, "{}", report["errors"]);
    // Every call was resumed and answered (none cancelled: the stream never
    // showed a progress to cancel after).
    let calls = &report["operations"]["cancel_call"];
    assert!(calls["ok"].as_u64().unwrap() >= 2, "{calls}");
    assert!(status.success(), "mcp-loadtest exit status {status}");
}
