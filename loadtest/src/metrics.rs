//! The generator's own figures as Prometheus text, served on request
//! (`--metrics-listen ADDR`, `GET /metrics`) while a run goes on: a
//! Prometheus next to the server's can then chart what was offered beside
//! what the server saw.
//!
//! Families (labels in braces):
//! - `mcp_loadtest_operations_total{operation, outcome}`: operations that
//!   ended, `outcome` `ok` or `failed`;
//! - `mcp_loadtest_latency_seconds{operation, quantile}`: latency of the
//!   successful operations since the start, quantiles 0.5, 0.9, 0.99, 1;
//! - `mcp_loadtest_errors_total{key}`: failures by error key;
//! - `mcp_loadtest_protocol_violations_total`;
//! - `mcp_loadtest_active_sessions`;
//! - `mcp_loadtest_arrivals_total`, `mcp_loadtest_dropped_arrivals_total`
//!   (open model).
//!
//! Owner and stop path: `drive` starts the [`Endpoint`] before the run and
//! drops it after the report (its task is aborted). Bounds: at most
//! [`MAX_CONNECTIONS`] scrapes at once (more wait in the kernel's backlog),
//! each with a 5 s limit to send its request.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus::{CounterVec, Encoder, Gauge, GaugeVec, Opts, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::stats::Stats;

/// Scrapes served at once.
const MAX_CONNECTIONS: usize = 16;
/// Time a scraper has to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint; serves until dropped.
#[derive(Debug)]
pub(crate) struct Endpoint {
    task: JoinHandle<()>,
    /// Where it listens (the port chosen when `:0` was asked).
    pub(crate) addr: SocketAddr,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Endpoint {
    /// Listens on `addr`.
    ///
    /// # Errors
    /// The address cannot be bound.
    pub(crate) async fn start(addr: SocketAddr, stats: Arc<Stats>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("--metrics-listen {addr}"))?;
        let addr = listener.local_addr()?;
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let task = tokio::spawn(async move {
            loop {
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let stats = Arc::clone(&stats);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<_>| {
                        let stats = Arc::clone(&stats);
                        async move { Ok::<_, Infallible>(answer(&request, &stats)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .keep_alive(false)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    drop(permit);
                });
            }
        });
        Ok(Self { task, addr })
    }
}

fn answer<B>(request: &Request<B>, stats: &Stats) -> Response<Full<Bytes>> {
    let (status, body) = if request.uri().path() != "/metrics" {
        (StatusCode::NOT_FOUND, "GET /metrics\n".to_owned())
    } else if request.method() != hyper::Method::GET {
        (StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n".to_owned())
    } else {
        match text(stats) {
            Ok(text) => (StatusCode::OK, text),
            Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{err:#}\n")),
        }
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(TextEncoder::new().format_type()) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

/// The figures so far, in the text format.
///
/// # Errors
/// A family could not be registered or encoded (names are constants).
pub(crate) fn text(stats: &Stats) -> anyhow::Result<String> {
    let registry = Registry::new();
    let operations = CounterVec::new(
        Opts::new(
            "mcp_loadtest_operations_total",
            "Operations that ended, by outcome.",
        ),
        &["operation", "outcome"],
    )?;
    let latency = GaugeVec::new(
        Opts::new(
            "mcp_loadtest_latency_seconds",
            "Latency of the successful operations since the start, at a quantile.",
        ),
        &["operation", "quantile"],
    )?;
    let errors = CounterVec::new(
        Opts::new("mcp_loadtest_errors_total", "Failures by error key."),
        &["key"],
    )?;
    for (name, (ok, failed, hist)) in stats.names().iter().zip(stats.figures()) {
        operations
            .with_label_values(&[name, "ok"])
            .inc_by(ok as f64);
        operations
            .with_label_values(&[name, "failed"])
            .inc_by(failed as f64);
        if !hist.is_empty() {
            for (label, q) in [("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99), ("1", 1.0)] {
                latency
                    .with_label_values(&[name, label])
                    .set(hist.value_at_quantile(q) as f64 / 1e6);
            }
        }
    }
    for (key, n) in stats.errors() {
        errors.with_label_values(&[&key]).inc_by(n as f64);
    }
    let (_, _, violations) = stats.totals();
    let gauge = |name: &str, help: &str, value: u64| -> anyhow::Result<Gauge> {
        let gauge = Gauge::new(name, help)?;
        gauge.set(value as f64);
        Ok(gauge)
    };
    registry.register(Box::new(operations))?;
    registry.register(Box::new(latency))?;
    registry.register(Box::new(errors))?;
    registry.register(Box::new(gauge(
        "mcp_loadtest_protocol_violations_total",
        "Answers that broke a protocol rule.",
        violations,
    )?))?;
    registry.register(Box::new(gauge(
        "mcp_loadtest_active_sessions",
        "Sessions open now.",
        stats.active_sessions.load(Ordering::Relaxed),
    )?))?;
    registry.register(Box::new(gauge(
        "mcp_loadtest_arrivals_total",
        "Arrivals of the open model so far.",
        stats.arrivals.load(Ordering::Relaxed),
    )?))?;
    registry.register(Box::new(gauge(
        "mcp_loadtest_dropped_arrivals_total",
        "Arrivals dropped because every session was busy.",
        stats.dropped_arrivals.load(Ordering::Relaxed),
    )?))?;
    let mut out = Vec::new();
    TextEncoder::new().encode(&registry.gather(), &mut out)?;
    Ok(String::from_utf8(out)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::OpId;
    use crate::stats::ErrorKind;

    #[test]
    fn figures_become_prometheus_text() {
        let stats = Stats::new(&["initialize".to_owned(), "call_tool:add".to_owned()]).unwrap();
        stats.ok(OpId(1), Duration::from_millis(20));
        stats.ok(OpId(1), Duration::from_millis(40));
        stats.failed(
            OpId(1),
            &ErrorKind::Check("check:equals"),
            tokio::time::Instant::now(),
        );
        let text = text(&stats).unwrap();
        for line in [
            "mcp_loadtest_operations_total{operation=\"call_tool:add\",outcome=\"ok\"} 2",
            "mcp_loadtest_operations_total{operation=\"call_tool:add\",outcome=\"failed\"} 1",
            "mcp_loadtest_errors_total{key=\"check:equals\"} 1",
            // 20 ms, within the histograms' three significant figures.
            "mcp_loadtest_latency_seconds{operation=\"call_tool:add\",quantile=\"0.5\"} 0.020015",
            "mcp_loadtest_protocol_violations_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        // No latency for an operation with no success.
        assert!(
            !text.contains("operation=\"initialize\",quantile"),
            "{text}"
        );
    }
}
