//! The memory floor for `loadtest/peers/compare.sh`: the least a server can
//! keep per MCP session and still answer the Streamable HTTP calls the
//! comparison makes. No MCP library, no framework: hyper 1 on a
//! current-thread tokio runtime.
//!
//! - POST `initialize` creates a session (a counter as `Mcp-Session-Id`) and
//!   answers with a JSON result.
//! - POST notifications answer 202; POST `tools/call` answers the echo result
//!   as JSON; any POST but `initialize` needs a known session.
//! - GET opens the session's standalone SSE stream: a response whose body is
//!   a channel receiver that never yields, its sender kept in the session
//!   entry, so the stream stays open until DELETE or the client leaves.
//! - DELETE removes the session, which drops the sender and ends the stream.
//!
//! `hyper-floor ADDR`

use std::{
    collections::HashMap,
    convert::Infallible,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Body, Frame, Incoming},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;

const SESSION_HEADER: &str = "mcp-session-id";

/// One entry per live session. The sender, when a GET stream is open, keeps
/// that stream's body pending; dropping it ends the stream.
#[derive(Default)]
struct Session {
    stream: Option<mpsc::Sender<Bytes>>,
}

#[derive(Default)]
struct Sessions {
    next_id: u64,
    by_id: HashMap<String, Session>,
}

type Shared = Arc<Mutex<Sessions>>;

/// A response body: a whole JSON document, or an SSE stream fed by a channel.
enum ReplyBody {
    Full(Full<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ReplyBody::Full(full) => Pin::new(full).poll_frame(cx),
            ReplyBody::Stream(rx) => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }
}

fn status(code: StatusCode) -> Response<ReplyBody> {
    let mut response = Response::new(ReplyBody::Full(Full::default()));
    *response.status_mut() = code;
    response
}

fn json_reply(body: Value, session_id: Option<&str>) -> Response<ReplyBody> {
    let mut builder = Response::builder().header("content-type", "application/json");
    if let Some(id) = session_id {
        builder = builder.header(SESSION_HEADER, id);
    }
    builder
        .body(ReplyBody::Full(Full::new(Bytes::from(body.to_string()))))
        .unwrap_or_else(|_| status(StatusCode::INTERNAL_SERVER_ERROR))
}

fn session_of(request: &Request<Incoming>) -> Option<String> {
    request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn handle(
    sessions: Shared,
    request: Request<Incoming>,
) -> Result<Response<ReplyBody>, Infallible> {
    let session_id = session_of(&request);
    let known = |id: &Option<String>| {
        id.as_ref()
            .is_some_and(|id| sessions.lock().is_ok_and(|s| s.by_id.contains_key(id)))
    };
    let reply = match *request.method() {
        Method::POST => {
            let Ok(body) = request.into_body().collect().await else {
                return Ok(status(StatusCode::BAD_REQUEST));
            };
            let Ok(message) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
                return Ok(status(StatusCode::BAD_REQUEST));
            };
            let method = message["method"].as_str().unwrap_or_default();
            if method == "initialize" {
                let Ok(mut all) = sessions.lock() else {
                    return Ok(status(StatusCode::INTERNAL_SERVER_ERROR));
                };
                all.next_id += 1;
                let id = format!("{:016x}", all.next_id);
                all.by_id.insert(id.clone(), Session::default());
                drop(all);
                let version = message["params"]["protocolVersion"].clone();
                json_reply(
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": {
                        "protocolVersion": version,
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "hyper-floor", "version": "0"}}}),
                    Some(&id),
                )
            } else if !known(&session_id) {
                status(StatusCode::NOT_FOUND)
            } else if message.get("id").is_none() {
                status(StatusCode::ACCEPTED)
            } else if method == "tools/call" {
                json_reply(
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": {"content": [
                        {"type": "text", "text": message["params"]["arguments"]["message"]}]}}),
                    None,
                )
            } else if method == "ping" {
                json_reply(
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": {}}),
                    None,
                )
            } else if method == "tools/list" {
                json_reply(
                    json!({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": [{
                        "name": "echo",
                        "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}]}}),
                    None,
                )
            } else {
                json_reply(
                    json!({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "method not found"}}),
                    None,
                )
            }
        }
        Method::GET => {
            let Some(id) = session_id else {
                return Ok(status(StatusCode::BAD_REQUEST));
            };
            let Ok(mut all) = sessions.lock() else {
                return Ok(status(StatusCode::INTERNAL_SERVER_ERROR));
            };
            let Some(session) = all.by_id.get_mut(&id) else {
                return Ok(status(StatusCode::NOT_FOUND));
            };
            // Capacity 1: nothing is ever sent; the channel only holds the stream open.
            let (tx, rx) = mpsc::channel(1);
            session.stream = Some(tx);
            Response::builder()
                .header("content-type", "text/event-stream")
                .header("cache-control", "no-cache")
                .body(ReplyBody::Stream(rx))
                .unwrap_or_else(|_| status(StatusCode::INTERNAL_SERVER_ERROR))
        }
        Method::DELETE => {
            let removed = session_id.is_some_and(|id| {
                sessions
                    .lock()
                    .is_ok_and(|mut all| all.by_id.remove(&id).is_some())
            });
            status(if removed {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            })
        }
        _ => status(StatusCode::METHOD_NOT_ALLOWED),
    };
    Ok(reply)
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18560".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("hyper-floor listening on http://{addr}/mcp");
        let sessions = Shared::default();
        loop {
            let (stream, _) = listener.accept().await?;
            // TCP_NODELAY like every other target; a socket that refuses it is only slower.
            let _ = stream.set_nodelay(true);
            let sessions = sessions.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| handle(sessions.clone(), request));
                // A connection error only ends that connection.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}
