//! A deliberately wrong MCP server, so tests can prove that `mcp-loadtest`
//! catches every wrong answer (no missed errors) and counts the right ones as
//! successes (no false errors).
//!
//! `faulty_server ADDR FAULT EVERY` serves a minimal Streamable HTTP MCP
//! server (session era, 2025-11-25) on `POST /mcp` with one tool, `echo`, and
//! answers every EVERY-th `tools/call` wrongly in the way FAULT names ([`Fault`]).
//! `GET /faults` tells how many wrong answers it gave, `GET /calls` how many
//! `tools/call` requests it received.
//!
//! A test starts it (`faulty_server 127.0.0.1:0 wrong_text 7`), reads the port
//! from its first stdout line (`listening on 127.0.0.1:PORT`), runs
//! `mcp-loadtest run --url http://127.0.0.1:PORT/mcp ...`, then compares
//! mcp-loadtest's failure count with `GET /faults` (they must be equal) and
//! kills the process. Bad arguments exit with 64 and one line on stderr.
//!
//! Owner and stop path: `main` owns the listener and runs until the process
//! is killed; each connection is a detached task that ends when its client
//! closes the connection.

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// Exit code for bad arguments (EX_USAGE).
const EXIT_USAGE: u8 = 64;
/// Largest request body accepted; larger ones get 413.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Pause after a failed accept (e.g. out of file descriptors), so the loop
/// does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);
/// Added to an integer id by the `wrong_id` fault.
const WRONG_ID_OFFSET: i64 = 1_000_000;
const MCP_PATH: &str = "/mcp";
const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");

type Body = Full<Bytes>;

/// How the faulty calls are answered; FAULT is the variant's snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Fault {
    /// Never wrong; EVERY has no effect.
    None,
    /// The id is the request's + 1000000 (or "wrong" if not an integer).
    WrongId,
    /// The text is the message followed by "!".
    WrongText,
    /// The result has `"isError": true`.
    IsError,
    /// HTTP 500 with a JSON-RPC error (-32603).
    #[serde(rename = "http_500")]
    Http500,
    /// 200 with a JSON-RPC error (-32603).
    JsonrpcError,
    /// Neither result nor error.
    NoResult,
    /// The right response twice, as two SSE events.
    SseDuplicate,
    /// The result's `content` is `[]`.
    EmptyContent,
}

/// Shared by every connection task; lives as long as the process. The
/// counters use `SeqCst`: a test reads them right after its last answer.
#[derive(Debug)]
struct State {
    fault: Fault,
    /// Call n is faulty when `n % every == 0`; at least 1.
    every: u64,
    /// `tools/call` requests received (`GET /calls`).
    calls: AtomicU64,
    /// Wrong answers given (`GET /faults`), counted before each is sent.
    faults: AtomicU64,
    /// Source of session ids.
    sessions: AtomicU64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, state) = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("faulty_server: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let listener = match listen(addr).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("faulty_server: cannot listen on {addr}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let state = Arc::new(state);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(err) => {
                eprintln!("faulty_server: accept failed: {err}");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(Arc::clone(&state), req));
            // A client that goes away mid-request is no concern of this server.
            let _ignored = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Binds `addr` and announces the real address on stdout.
async fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let listener = TcpListener::bind(addr).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {}", listener.local_addr()?)?;
    stdout.flush()?;
    Ok(listener)
}

/// `ADDR FAULT EVERY`; the error is the one line to print.
fn parse_args(args: &[String]) -> Result<(SocketAddr, State), String> {
    let [addr, fault, every] = args else {
        return Err("usage: faulty_server ADDR FAULT EVERY".to_owned());
    };
    let addr: SocketAddr = addr
        .parse()
        .map_err(|_| format!("ADDR {addr:?} is not an IP address and port"))?;
    if !addr.ip().is_loopback() {
        return Err(format!("ADDR {addr} is not a loopback address"));
    }
    let fault: Fault = serde_json::from_value(Value::from(fault.as_str()))
        .map_err(|_| format!("unknown FAULT {fault:?}"))?;
    let every = match every.parse::<u64>() {
        Ok(every) if every >= 1 => every,
        _ => return Err(format!("EVERY {every:?} is not an integer >= 1")),
    };
    let state = State {
        fault,
        every,
        calls: AtomicU64::new(0),
        faults: AtomicU64::new(0),
        sessions: AtomicU64::new(0),
    };
    Ok((addr, state))
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let has_session = req.headers().contains_key(SESSION_HEADER);
    Ok(match (req.method(), req.uri().path()) {
        (&Method::POST, MCP_PATH) => post(&state, req, has_session).await,
        // The client's DELETE at its end: every session "terminates".
        (&Method::DELETE, MCP_PATH) if has_session => empty(StatusCode::OK),
        (&Method::DELETE, MCP_PATH) => empty(StatusCode::BAD_REQUEST),
        // 2025-11-25 transports: no standalone GET stream is offered.
        (_, MCP_PATH) => {
            let mut response = empty(StatusCode::METHOD_NOT_ALLOWED);
            let allow = HeaderValue::from_static("POST, DELETE");
            response.headers_mut().insert(ALLOW, allow);
            response
        }
        (&Method::GET, "/faults") => count(&state.faults),
        (&Method::GET, "/calls") => count(&state.calls),
        _ => empty(StatusCode::NOT_FOUND),
    })
}

/// One JSON-RPC message POSTed to `/mcp`.
async fn post(state: &State, req: Request<Incoming>, has_session: bool) -> Response<Body> {
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES);
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(err) if err.downcast_ref::<LengthLimitError>().is_some() => {
            return empty(StatusCode::PAYLOAD_TOO_LARGE);
        }
        Err(_) => return empty(StatusCode::BAD_REQUEST),
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, Value::Null, -32700, "parse error");
    };
    // Batches are not part of 2025-11-25.
    if !message.is_object() || message["jsonrpc"] != "2.0" {
        return bad_request(Value::Null, "invalid request");
    }
    let method = message["method"].as_str();
    let id = message.get("id").cloned();
    if method != Some("initialize") && !has_session {
        // 2025-11-25 transports, session management: 400 without the header.
        return bad_request(id.unwrap_or(Value::Null), "missing Mcp-Session-Id");
    }
    let (Some(method), Some(id)) = (method, id) else {
        // A notification, or the client's response to a request of ours.
        let answer = message.get("result").or(message.get("error"));
        if method.is_some() || answer.is_some() {
            return empty(StatusCode::ACCEPTED);
        }
        return bad_request(Value::Null, "invalid request");
    };
    let params = &message["params"];
    match method {
        "initialize" => {
            let Some(version) = params["protocolVersion"].as_str() else {
                return rpc_error(id, -32602, "no params.protocolVersion");
            };
            let result = json!({
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "faulty-server", "version": "0.0.0"},
            });
            let mut response = json_reply(StatusCode::OK, &success(id, result));
            let session = state.sessions.fetch_add(1, Ordering::SeqCst) + 1;
            let headers = response.headers_mut();
            headers.insert(SESSION_HEADER, HeaderValue::from(session));
            response
        }
        "tools/list" => {
            let tool = json!({"name": "echo", "description": "Returns its message",
                "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}},
                    "required": ["message"]}});
            json_reply(StatusCode::OK, &success(id, json!({"tools": [tool]})))
        }
        "tools/call" => {
            let n = state.calls.fetch_add(1, Ordering::SeqCst) + 1;
            // Calls the tests do not make are answered as they should be,
            // never faulty.
            if params["name"] != "echo" {
                return rpc_error(id, -32602, "unknown tool");
            }
            let Some(text) = params["arguments"]["message"].as_str() else {
                return rpc_error(id, -32602, "arguments.message is not a string");
            };
            let fault = if state.fault != Fault::None && n.is_multiple_of(state.every) {
                state.faults.fetch_add(1, Ordering::SeqCst);
                state.fault
            } else {
                Fault::None
            };
            echo(fault, id, text)
        }
        _ => rpc_error(id, -32601, "method not found"),
    }
}

/// The answer to `tools/call echo {message: text}`, wrong as `fault` says.
fn echo(fault: Fault, id: Value, text: &str) -> Response<Body> {
    let content = json!([{"type": "text", "text": text}]);
    let result = match fault {
        Fault::None | Fault::SseDuplicate => json!({"content": content}),
        Fault::WrongId => {
            let wrong = id.as_i64().and_then(|n| n.checked_add(WRONG_ID_OFFSET));
            let wrong = wrong.map_or_else(|| json!("wrong"), Value::from);
            return json_reply(StatusCode::OK, &success(wrong, json!({"content": content})));
        }
        Fault::WrongText => json!({"content": [{"type": "text", "text": format!("{text}!")}]}),
        Fault::IsError => json!({"content": content, "isError": true}),
        Fault::EmptyContent => json!({"content": []}),
        Fault::Http500 => return error(StatusCode::INTERNAL_SERVER_ERROR, id, -32603, "injected"),
        Fault::JsonrpcError => return rpc_error(id, -32603, "injected"),
        Fault::NoResult => return json_reply(StatusCode::OK, &json!({"jsonrpc": "2.0", "id": id})),
    };
    let message = success(id, result);
    if fault == Fault::SseDuplicate {
        let events = format!("data: {message}\n\n").repeat(2);
        return reply(StatusCode::OK, "text/event-stream", events.into());
    }
    json_reply(StatusCode::OK, &message)
}

fn success(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error answered with 200.
fn rpc_error(id: Value, code: i64, message: &str) -> Response<Body> {
    error(StatusCode::OK, id, code, message)
}

/// An invalid request (-32600) answered with 400.
fn bad_request(id: Value, message: &str) -> Response<Body> {
    error(StatusCode::BAD_REQUEST, id, -32600, message)
}

fn error(status: StatusCode, id: Value, code: i64, message: &str) -> Response<Body> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    json_reply(status, &body)
}

fn json_reply(status: StatusCode, body: &Value) -> Response<Body> {
    reply(status, "application/json", body.to_string().into())
}

fn count(counter: &AtomicU64) -> Response<Body> {
    let body = format!("{}\n", counter.load(Ordering::SeqCst));
    reply(StatusCode::OK, "text/plain", body.into())
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    response
}

fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Body> {
    let mut response = empty(status);
    *response.body_mut() = Full::new(body);
    let value = HeaderValue::from_static(content_type);
    response.headers_mut().insert(CONTENT_TYPE, value);
    response
}
