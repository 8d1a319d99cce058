//! A test OTLP receiver: a real HTTP server on `127.0.0.1:0` taking
//! `POST /v1/traces` as OTLP/HTTP does (protobuf, or OTLP/JSON), and
//! `POST /v1/logs` (protobuf), decoded with the `opentelemetry-proto`
//! messages, keeping every span and log record for the test's assertions.
//!
//! Owner: the test holding the [`OtlpReceiver`]. Stop path: dropping it
//! stops the server's actix system and joins its thread.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use anyhow::{Context, bail};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;

/// Largest export request taken: far above what a batch of 512 spans
/// (the SDK's default batch) weighs.
const MAX_EXPORT_BYTES: usize = 16 << 20;

/// One span as received, ids in lowercase hex.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; `None` for a root span.
    pub parent_span_id: Option<String>,
    /// The span's name.
    pub name: String,
    /// `server`, `client`, `internal`, `producer`, `consumer` or
    /// `unspecified`.
    pub kind: &'static str,
    /// Attributes, values as text (numbers and booleans printed, arrays
    /// joined with `,`).
    pub attributes: BTreeMap<String, String>,
    /// The spans it links to.
    pub links: Vec<ReceivedLink>,
    /// `unset`, `ok` or `error`.
    pub status: &'static str,
    /// The status description.
    pub status_message: String,
    /// The attributes of the resource that sent it (`service.name`, …).
    pub resource: BTreeMap<String, String>,
}

/// One link of a [`ReceivedSpan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedLink {
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
}

impl ReceivedSpan {
    /// The attribute `key`, if present.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// One log record as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedLog {
    /// Its event name.
    pub event_name: String,
    /// Its severity text.
    pub severity_text: String,
    /// Attributes, values as text (as a span's).
    pub attributes: BTreeMap<String, String>,
    /// The attributes of the resource that sent it.
    pub resource: BTreeMap<String, String>,
}

/// What the server's handler shares with the test.
#[derive(Debug, Default)]
struct Received {
    /// Every span received so far, in arrival order.
    spans: Mutex<Vec<ReceivedSpan>>,
    /// Every log record received so far, in arrival order.
    logs: Mutex<Vec<ReceivedLog>>,
    /// Bumped after each export request is stored; [`OtlpReceiver::wait_until`]
    /// waits on it.
    arrivals: tokio::sync::Notify,
}

/// A running receiver. Point an exporter at [`Self::endpoint`].
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Received>,
    /// Completing it stops the server.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Starts a receiver on a free loopback port.
    ///
    /// # Errors
    /// No port could be bound.
    pub fn start() -> anyhow::Result<Self> {
        let received = Arc::new(Received::default());
        let shared = Arc::clone(&received);
        let (tx, rx) = mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let system = actix_rt::System::new();
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(web::Data::from(Arc::clone(&shared)))
                    .app_data(web::PayloadConfig::new(MAX_EXPORT_BYTES))
                    .route("/v1/traces", web::post().to(export))
                    .route("/v1/logs", web::post().to(export_logs))
            })
            .workers(1)
            .disable_signals()
            .bind(("127.0.0.1", 0));
            let server = match server {
                Ok(server) => server,
                Err(err) => {
                    let _ = tx.send(Err(err));
                    return;
                }
            };
            let _ = tx.send(Ok(server.addrs()[0]));
            let server = server.shutdown_timeout(1).run();
            let handle = server.handle();
            system.block_on(async move {
                actix_rt::spawn(async move {
                    let _ = stop_rx.await;
                    handle.stop(true).await;
                });
                let _ = server.await;
            });
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .context("OTLP receiver did not start")??;
        Ok(Self {
            addr,
            received,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`: the base endpoint, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` or `--otlp-endpoint` take it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received
            .spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every log record received so far.
    pub fn logs(&self) -> Vec<ReceivedLog> {
        self.received
            .logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until one received log record satisfies `predicate`, and
    /// returns it.
    ///
    /// # Errors
    /// None did within `timeout`; the error lists the records received.
    pub async fn wait_for_log(
        &self,
        predicate: impl Fn(&ReceivedLog) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<ReceivedLog> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.received.arrivals.notified();
            let logs = self.logs();
            if let Some(log) = logs.iter().find(|l| predicate(l)) {
                return Ok(log.clone());
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                bail!(
                    "no match within {timeout:?}; received {} log records: {logs:#?}",
                    logs.len()
                );
            }
        }
    }

    /// Waits until one received span satisfies `predicate`, and returns it.
    ///
    /// # Errors
    /// None did within `timeout`; the error lists the spans received.
    pub async fn wait_for(
        &self,
        predicate: impl Fn(&ReceivedSpan) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<ReceivedSpan> {
        let spans = self
            .wait_until(|spans| spans.iter().any(&predicate), timeout)
            .await?;
        spans
            .into_iter()
            .find(|s| predicate(s))
            .context("a span satisfied the predicate")
    }

    /// Waits until the spans received so far satisfy `predicate`, and
    /// returns them.
    ///
    /// # Errors
    /// They did not within `timeout`; the error lists them.
    pub async fn wait_until(
        &self,
        predicate: impl Fn(&[ReceivedSpan]) -> bool,
        timeout: Duration,
    ) -> anyhow::Result<Vec<ReceivedSpan>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before looking, so an arrival in between wakes it.
            let arrived = self.received.arrivals.notified();
            let spans = self.spans();
            if predicate(&spans) {
                return Ok(spans);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                bail!(
                    "no match within {timeout:?}; received {} spans: {:#?}",
                    spans.len(),
                    spans
                        .iter()
                        .map(|s| (&s.name, &s.trace_id, &s.attributes))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// `POST /v1/traces`: protobuf (`application/x-protobuf`, the default) or
/// OTLP/JSON (`application/json`); answers an empty
/// `ExportTraceServiceResponse` in the same encoding (full success).
async fn export(req: HttpRequest, body: web::Bytes, received: web::Data<Received>) -> HttpResponse {
    let json = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let decoded = if json {
        serde_json::from_slice::<ExportTraceServiceRequest>(&body).map_err(|err| err.to_string())
    } else {
        ExportTraceServiceRequest::decode(body.as_ref()).map_err(|err| err.to_string())
    };
    let request = match decoded {
        Ok(request) => request,
        Err(err) => return HttpResponse::BadRequest().body(err),
    };
    let spans = flatten(request);
    received
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(spans);
    received.arrivals.notify_waiters();
    let response = ExportTraceServiceResponse::default();
    if json {
        HttpResponse::Ok()
            .content_type("application/json")
            .body(serde_json::to_vec(&response).unwrap_or_default())
    } else {
        HttpResponse::Ok()
            .content_type("application/x-protobuf")
            .body(response.encode_to_vec())
    }
}

/// `POST /v1/logs`: protobuf; answers an empty `ExportLogsServiceResponse`.
async fn export_logs(body: web::Bytes, received: web::Data<Received>) -> HttpResponse {
    let request = match ExportLogsServiceRequest::decode(body.as_ref()) {
        Ok(request) => request,
        Err(err) => return HttpResponse::BadRequest().body(err.to_string()),
    };
    let mut logs = Vec::new();
    for resource_logs in request.resource_logs {
        let resource = resource_logs
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope_logs in resource_logs.scope_logs {
            for record in scope_logs.log_records {
                logs.push(ReceivedLog {
                    event_name: record.event_name,
                    severity_text: record.severity_text,
                    attributes: attributes(&record.attributes),
                    resource: resource.clone(),
                });
            }
        }
    }
    received
        .logs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(logs);
    received.arrivals.notify_waiters();
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .body(ExportLogsServiceResponse::default().encode_to_vec())
}

fn flatten(request: ExportTraceServiceRequest) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                let (status, status_message) = match span.status {
                    Some(s) => (status_name(s.code), s.message),
                    None => ("unset", String::new()),
                };
                out.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: (!span.parent_span_id.is_empty())
                        .then(|| hex(&span.parent_span_id)),
                    name: span.name,
                    kind: kind_name(span.kind),
                    attributes: attributes(&span.attributes),
                    links: span
                        .links
                        .iter()
                        .map(|l| ReceivedLink {
                            trace_id: hex(&l.trace_id),
                            span_id: hex(&l.span_id),
                        })
                        .collect(),
                    status,
                    status_message,
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

fn kind_name(kind: i32) -> &'static str {
    match SpanKind::try_from(kind) {
        Ok(SpanKind::Server) => "server",
        Ok(SpanKind::Client) => "client",
        Ok(SpanKind::Internal) => "internal",
        Ok(SpanKind::Producer) => "producer",
        Ok(SpanKind::Consumer) => "consumer",
        Ok(SpanKind::Unspecified) | Err(_) => "unspecified",
    }
}

fn status_name(code: i32) -> &'static str {
    // opentelemetry.proto.trace.v1.Status.StatusCode
    match code {
        1 => "ok",
        2 => "error",
        _ => "unset",
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::ArrayValue(a)) => {
            a.values.iter().map(text).collect::<Vec<_>>().join(",")
        }
        Some(any_value::Value::BytesValue(b)) => hex(b),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}
