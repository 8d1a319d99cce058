//! The audit trail (`[audit]`): one JSON line per request a node's server
//! handles (a tool called, a prompt got, a resource read, a list), for an
//! operator to hand to the customer it concerns: when, who (the
//! principal), which session or request, which upstream, which tool or
//! method, a SHA-256 of the arguments (the arguments themselves only when
//! configured), the outcome and the duration, and the node.
//!
//! Writing never holds up a request: records go through a bounded queue
//! to a thread of their own, which appends them to stdout or to a file
//! (rotated to `<file>.1` past `max_file_bytes`). A full queue drops the
//! record and counts it (`mcp_audit_records_dropped_total`). Installed once
//! per process ([`install`]); until then, or without `[audit]`,
//! [`Audit::start`] costs one atomic load.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::SystemTime;

use tokio::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::metrics::metrics;

/// `[audit]` of the node's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Where the records go: `"stdout"` (the default), or a file path,
    /// appended to.
    pub output: String,
    /// Whether a record carries the call's arguments themselves, beside
    /// their hash. Default `false`: argument values may hold what the
    /// customer's users typed, secrets included.
    pub arguments: bool,
    /// Records waiting for the writer at most; past it they are dropped
    /// (and counted), never waited for. Default 10000.
    pub queue: usize,
    /// A file output is renamed to `<file>.1` (replacing the last one)
    /// once it holds this many bytes, and a new one begun. Default 100 MiB.
    pub max_file_bytes: u64,
    /// Each record is also sent as an OTLP log record (event
    /// `mcp.audit`, the fields as `mcp.audit.*` attributes) to the
    /// collector the traces go to (`/v1/logs`, or
    /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`). Default `false`. Without an
    /// OTLP endpoint it is refused at start.
    pub otlp: bool,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            output: "stdout".to_owned(),
            arguments: false,
            queue: 10_000,
            max_file_bytes: 100 * 1024 * 1024,
            otlp: false,
        }
    }
}

impl AuditConfig {
    /// Whether the records go to stdout.
    pub fn to_stdout(&self) -> bool {
        self.output == "stdout"
    }
}

/// The installed trail: the queue, and what every record carries.
#[derive(Debug)]
struct Trail {
    queue: SyncSender<Value>,
    node: String,
    arguments: bool,
}

static TRAIL: OnceLock<Trail> = OnceLock::new();

/// The OTLP logger of the process, set by [`crate::init`] when log records
/// are exported ([`crate::OtelConfig::logs_endpoint`]).
static OTLP: OnceLock<opentelemetry_sdk::logs::SdkLogger> = OnceLock::new();

/// Hands the audit trail the logger its OTLP log records go through.
pub(crate) fn export_to(logger: opentelemetry_sdk::logs::SdkLogger) {
    let _ = OTLP.set(logger);
}

/// Whether audit records can go out as OTLP log records (an OTLP endpoint
/// is configured, and log records are not turned off).
pub fn otlp_available() -> bool {
    OTLP.get().is_some()
}
/// Starts the audit trail of this process, as `config` says, each record
/// naming `node`. A second call changes nothing.
///
/// # Errors
/// The output file cannot be opened for appending.
pub fn install(config: &AuditConfig, node: &str) -> std::io::Result<()> {
    if config.otlp && !otlp_available() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "audit.otlp needs an OTLP endpoint (--otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT) and OTEL_LOGS_EXPORTER not none",
        ));
    }
    let mut sink = Sink::open(config)?;
    let otlp = config.otlp.then(|| OTLP.get()).flatten();
    let (queue, records) = std::sync::mpsc::sync_channel::<Value>(config.queue.max(1));
    std::thread::Builder::new()
        .name("mcp-audit".into())
        .spawn(move || {
            for record in records {
                if let Some(logger) = otlp {
                    emit(logger, &record);
                }
                sink.write(&record);
            }
        })?;
    let _ = TRAIL.set(Trail {
        queue,
        node: node.to_owned(),
        arguments: config.arguments,
    });
    Ok(())
}

/// Where the writer thread appends.
struct Sink {
    file: Option<(PathBuf, std::fs::File, u64)>,
    max_file_bytes: u64,
}

impl Sink {
    fn open(config: &AuditConfig) -> std::io::Result<Self> {
        let file = if config.to_stdout() {
            None
        } else {
            let path = PathBuf::from(&config.output);
            let file = append(&path)?;
            let len = file.metadata()?.len();
            Some((path, file, len))
        };
        Ok(Self {
            file,
            max_file_bytes: config.max_file_bytes.max(1),
        })
    }

    fn write(&mut self, record: &Value) {
        let mut line = record.to_string();
        line.push('\n');
        let written = match &mut self.file {
            None => std::io::stdout().lock().write_all(line.as_bytes()),
            Some((path, file, len)) => {
                if *len > 0 && *len + line.len() as u64 > self.max_file_bytes {
                    match rotate(path) {
                        Ok(fresh) => (*file, *len) = (fresh, 0),
                        Err(err) => {
                            tracing::warn!(%err, path = %path.display(), "The audit file could not be rotated; it grows on.");
                        }
                    }
                }
                *len += line.len() as u64;
                file.write_all(line.as_bytes())
            }
        };
        match written {
            Ok(()) => {
                let outcome = record["outcome"].as_str().unwrap_or("error");
                metrics().audit_records.with_label_values(&[outcome]).inc();
            }
            Err(err) => tracing::warn!(%err, "An audit record could not be written."),
        }
    }
}

/// One record as an OTLP log record: event `mcp.audit`, severity INFO, each
/// field an attribute `mcp.audit.<field>` (absent fields left out).
fn emit(logger: &opentelemetry_sdk::logs::SdkLogger, record: &Value) {
    use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, Severity};

    let mut log = logger.create_log_record();
    log.set_event_name("mcp.audit");
    log.set_severity_number(Severity::Info);
    log.set_severity_text("INFO");
    log.set_body(AnyValue::from("mcp.audit"));
    log.set_timestamp(SystemTime::now());
    if let Some(fields) = record.as_object() {
        for (key, value) in fields {
            let value = match value {
                Value::Null => continue,
                Value::Bool(b) => AnyValue::from(*b),
                Value::Number(n) => n.as_i64().map_or_else(
                    || AnyValue::from(n.as_f64().unwrap_or_default()),
                    AnyValue::from,
                ),
                Value::String(s) => AnyValue::from(s.clone()),
                other => AnyValue::from(other.to_string()),
            };
            log.add_attribute(format!("mcp.audit.{key}"), value);
        }
    }
    logger.emit(log);
}

fn append(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// `<file>` becomes `<file>.1`; a new `<file>` is begun.
fn rotate(path: &Path) -> std::io::Result<std::fs::File> {
    let mut old = path.as_os_str().to_owned();
    old.push(".1");
    std::fs::rename(path, old)?;
    append(path)
}

/// What one request is, for its record.
#[derive(Debug, Default)]
pub struct AuditedRequest<'a> {
    /// Its method.
    pub method: &'a str,
    /// Its params, as the client sent them.
    pub params: Option<&'a serde_json::Map<String, Value>>,
    /// The request's id, as the client sent it.
    pub id: Value,
    /// The client's principal (`<issuer>#<subject>`), when authorized.
    pub principal: Option<String>,
    /// Its session, when it has one.
    pub session: Option<String>,
    /// The hosted server it goes to, when it goes to one.
    pub upstream: Option<String>,
}

/// One request's record in the making: written when [`Audit::finish`]ed,
/// or as `cancelled` when dropped before (the client cancelled, the
/// request timed out, the node stopped).
#[derive(Debug)]
pub struct Audit {
    record: Option<Value>,
    started: Instant,
}

impl Audit {
    /// A record of the request `describe` tells of, when the trail is on
    /// (`describe` is not called otherwise: a node without `[audit]` pays
    /// one atomic load per request).
    pub fn start<'a>(describe: impl FnOnce() -> AuditedRequest<'a>) -> Option<Self> {
        let trail = TRAIL.get()?;
        let request = describe();
        let name = request.params.and_then(|p| {
            p.get("name")
                .or_else(|| p.get("uri"))
                .and_then(Value::as_str)
        });
        let arguments = request.params.and_then(|p| p.get("arguments"));
        let mut record = json!({
            "time": rfc3339(now_ms()),
            "node": trail.node,
            "principal": request.principal,
            "session": request.session,
            "request_id": request.id,
            "upstream": request.upstream,
            "method": request.method,
            "name": name,
            "arguments_sha256": arguments.map(hash),
        });
        if trail.arguments
            && let Some(arguments) = arguments
        {
            record["arguments"] = arguments.clone();
        }
        Some(Self {
            record: Some(record),
            started: Instant::now(),
        })
    }

    /// The request's outcome: its result (a tool's `isError` is
    /// `tool_error`) or its error.
    pub fn finish(mut self, outcome: Result<&Value, i32>) {
        let (label, code) = match outcome {
            Ok(result) if result.get("isError") == Some(&Value::Bool(true)) => ("tool_error", None),
            Ok(_) => ("ok", None),
            Err(code) => ("error", Some(code)),
        };
        self.send(label, code);
    }

    fn send(&mut self, outcome: &str, code: Option<i32>) {
        let (Some(mut record), Some(trail)) = (self.record.take(), TRAIL.get()) else {
            return;
        };
        record["outcome"] = json!(outcome);
        record["error_code"] = json!(code);
        record["duration_ms"] = json!(self.started.elapsed().as_secs_f64() * 1000.0);
        match trail.queue.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                metrics().audit_dropped.inc();
            }
        }
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        self.send("cancelled", None);
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The SHA-256 of a value's JSON, keys in the order the client sent them
/// (hex).
fn hash(value: &Value) -> String {
    let digest = Sha256::digest(value.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of a Unix time in milliseconds.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_its_size_is_rotated_once_and_begun_again() {
        let dir = std::env::temp_dir().join(format!("mcp-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let config = AuditConfig {
            output: path.display().to_string(),
            max_file_bytes: 40,
            ..AuditConfig::default()
        };
        let mut sink = Sink::open(&config).unwrap();
        for n in 0..3 {
            sink.write(&json!({"n": n, "outcome": "ok", "pad": "xxxxxxxxxx"}));
        }
        let now = std::fs::read_to_string(&path).unwrap();
        let before = std::fs::read_to_string(dir.join("audit.jsonl.1")).unwrap();
        assert_eq!(now.lines().count(), 1, "{now}");
        assert!(now.contains("\"n\":2"), "{now}");
        assert!(
            before.contains("\"n\":1") && !before.contains("\"n\":0"),
            "{before}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
