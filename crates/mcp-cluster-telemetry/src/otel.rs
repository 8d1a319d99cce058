//! OpenTelemetry traces over OTLP/HTTP: the configuration taken from the
//! standard `OTEL_*` variables (plus the node's `--otlp-endpoint`), and the
//! tracer provider built from it. Traces are off unless an endpoint is
//! configured.
//!
//! Read here, from the variables `main` hands over (never from the process
//! environment): `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`,
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`, `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_SAMPLER_ARG`, and `HOSTNAME` for `service.instance.id`;
//! for the audit trail's log records, `OTEL_LOGS_EXPORTER` and
//! `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` (else `/v1/logs` beside the traces).
//!
//! Read by the OpenTelemetry SDK itself from the process environment, as the
//! specification describes them, and checked here first so that a value
//! the SDK would skip without a word stops startup instead:
//! `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` (`key=value` pairs, comma-separated,
//! values percent-encoded; never echoed, as they may hold credentials),
//! `OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION` (`none` only: gzip and zstd are
//! not built in). The batch processor's `OTEL_BSP_SCHEDULE_DELAY`,
//! `OTEL_BSP_MAX_QUEUE_SIZE` and `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` are read
//! here and applied; `OTEL_BSP_EXPORT_TIMEOUT` is checked, but the batch
//! processor's thread does not apply it: one export request is bounded by
//! `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`.
//!
//! Not supported, refused at startup with a reason: the `grpc` and
//! `http/json` protocols, `https` endpoints (the workspace's HTTP client is
//! built without TLS: send to a collector on the node's network, which
//! forwards over TLS), exporters other than `otlp`, compression.
//!
//! Nothing but the endpoint's variables is checked while traces are off.

use std::collections::HashMap;
use std::time::Duration;

#[cfg(feature = "otlp")]
use async_trait::async_trait;
#[cfg(feature = "otlp")]
use opentelemetry::KeyValue;
#[cfg(feature = "otlp")]
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
#[cfg(feature = "otlp")]
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
#[cfg(feature = "otlp")]
use opentelemetry_sdk::{
    Resource,
    resource::TelemetryResourceDetector,
    trace::{BatchConfigBuilder, BatchSpanProcessor, Sampler},
};

/// `service.name` when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names the service.
pub const DEFAULT_SERVICE_NAME: &str = "mcp-node";

/// Export timeout when `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` is unset: the
/// specification's default, 10 s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP/HTTP path of traces, appended to a base endpoint.
const TRACES_PATH: &str = "v1/traces";

/// The OTLP/HTTP path of log records.
const LOGS_PATH: &str = "v1/logs";

#[cfg(feature = "otlp")]
/// The largest collector answer read: an `ExportTraceServiceResponse` is a
/// few bytes; anything much larger is not a collector.
const MAX_RESPONSE_BYTES: u64 = 64 * 1024;

/// How the node exports traces. [`Default`] is off.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OtelConfig {
    /// The URL spans are POSTed to (`…/v1/traces`), `http` only. `None`:
    /// traces are off, and every tracing helper of this crate does nothing.
    pub traces_endpoint: Option<String>,
    /// The URL log records are POSTed to (`…/v1/logs`): the audit trail's,
    /// when `[audit]` asks for them (`otlp = true`). Beside the traces,
    /// at the same collector: `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, else the
    /// base endpoint's `/v1/logs`; `None` with traces off, or with
    /// `OTEL_LOGS_EXPORTER=none`.
    pub logs_endpoint: Option<String>,
    /// `service.name`: `OTEL_SERVICE_NAME`, else the `service.name` of
    /// `OTEL_RESOURCE_ATTRIBUTES`, else [`DEFAULT_SERVICE_NAME`].
    pub service_name: String,
    /// `service.version`: this build's version unless
    /// `OTEL_RESOURCE_ATTRIBUTES` sets one.
    pub service_version: String,
    /// `service.instance.id`: `<hostname>-<pid>` unless
    /// `OTEL_RESOURCE_ATTRIBUTES` sets one. A caller that knows a better
    /// identity (the cluster's node id) may set it before [`crate::init`].
    pub service_instance_id: String,
    /// The other attributes of `OTEL_RESOURCE_ATTRIBUTES`, in order.
    pub resource_attributes: Vec<(String, String)>,
    /// Which traces are recorded: `OTEL_TRACES_SAMPLER` and
    /// `OTEL_TRACES_SAMPLER_ARG`, default `parentbased_always_on`.
    pub sampler: SamplerConfig,
    /// Longest wait for one export request; the specification's 10 s by
    /// default.
    pub timeout: Duration,
    /// The batch span processor's settings (`OTEL_BSP_*`).
    pub batch: BatchSettings,
}

/// The batch span processor's settings; `None` keeps the specification's
/// default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BatchSettings {
    /// `OTEL_BSP_SCHEDULE_DELAY`: time between two exports (5 s).
    pub schedule_delay: Option<Duration>,
    /// `OTEL_BSP_MAX_QUEUE_SIZE`: spans held waiting for export (2048);
    /// more are dropped.
    pub max_queue_size: Option<usize>,
    /// `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`: spans per export request (512).
    pub max_export_batch_size: Option<usize>,
}

/// The specification's `OTEL_BSP_MAX_QUEUE_SIZE` default, which a batch
/// size must not exceed.
const DEFAULT_MAX_QUEUE_SIZE: usize = 2048;

impl Default for OtelConfig {
    fn default() -> Self {
        Self {
            traces_endpoint: None,
            logs_endpoint: None,
            service_name: DEFAULT_SERVICE_NAME.to_owned(),
            service_version: env!("CARGO_PKG_VERSION").to_owned(),
            service_instance_id: format!("{}-{}", hostname(None), std::process::id()),
            resource_attributes: Vec::new(),
            sampler: SamplerConfig::default(),
            timeout: DEFAULT_TIMEOUT,
            batch: BatchSettings::default(),
        }
    }
}

/// The samplers of `OTEL_TRACES_SAMPLER`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub enum SamplerConfig {
    /// `always_on`.
    AlwaysOn,
    /// `always_off`.
    AlwaysOff,
    /// `traceidratio` with the ratio of `OTEL_TRACES_SAMPLER_ARG` (0 to 1).
    TraceIdRatio(f64),
    /// `parentbased_always_on`: follow the caller's decision, record roots.
    #[default]
    ParentBasedAlwaysOn,
    /// `parentbased_always_off`.
    ParentBasedAlwaysOff,
    /// `parentbased_traceidratio`.
    ParentBasedTraceIdRatio(f64),
}

/// A value of an `OTEL_*` variable (or of the endpoint flag) this build
/// cannot honour.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{var}={value}: {reason}")]
#[non_exhaustive]
pub struct OtelConfigError {
    /// The variable (or flag).
    pub var: &'static str,
    /// Its value; a URL as [`crate::redacted_url`] shows it (the user
    /// info and query may hold credentials), headers not at all.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl OtelConfig {
    /// The configuration the variables `vars` describe (pass
    /// `std::env::vars()`), with `endpoint` (the `--otlp-endpoint` flag, a
    /// base URL like `OTEL_EXPORTER_OTLP_ENDPOINT`) taking precedence over
    /// the variables' endpoints. Traces are on when an endpoint is given,
    /// unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
    /// Empty values count as unset, as the specification says.
    ///
    /// # Errors
    /// A value this build does not support or that does not parse.
    pub fn from_env(
        vars: impl IntoIterator<Item = (String, String)>,
        endpoint: Option<&str>,
    ) -> Result<Self, OtelConfigError> {
        let vars: HashMap<String, String> = vars
            .into_iter()
            .filter(|(k, v)| (k.starts_with("OTEL_") || k == "HOSTNAME") && !v.trim().is_empty())
            .collect();
        let get = |name: &str| vars.get(name).map(|v| v.trim());

        let disabled = get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let exporters = get("OTEL_TRACES_EXPORTER").unwrap_or("otlp");
        let mut otlp = false;
        for exporter in exporters.split(',').map(str::trim) {
            match exporter {
                "otlp" => otlp = true,
                "none" => {}
                _ => {
                    return Err(OtelConfigError {
                        var: "OTEL_TRACES_EXPORTER",
                        value: exporters.to_owned(),
                        reason: "only otlp and none are supported",
                    });
                }
            }
        }
        let endpoint = if disabled || !otlp {
            None
        } else if let Some(base) = endpoint.filter(|e| !e.trim().is_empty()) {
            Some(signal_url("--otlp-endpoint", base.trim())?)
        } else if let Some(url) = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            check_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)?;
            Some(url.to_owned())
        } else if let Some(base) = get("OTEL_EXPORTER_OTLP_ENDPOINT") {
            Some(signal_url("OTEL_EXPORTER_OTLP_ENDPOINT", base)?)
        } else {
            None
        };
        // Off: nothing else matters, and nothing else can fail startup.
        if endpoint.is_none() {
            return Ok(Self::default());
        }
        let logs_endpoint = match get("OTEL_LOGS_EXPORTER") {
            Some("none") => None,
            Some("otlp") | None => {
                if let Some(url) = get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") {
                    check_url("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", url)?;
                    Some(url.to_owned())
                } else {
                    endpoint
                        .as_deref()
                        .and_then(|traces| traces.strip_suffix(TRACES_PATH))
                        .map(|base| format!("{base}{LOGS_PATH}"))
                }
            }
            Some(other) => {
                return Err(OtelConfigError {
                    var: "OTEL_LOGS_EXPORTER",
                    value: other.to_owned(),
                    reason: "only otlp and none are supported",
                });
            }
        };
        let mut config = Self {
            traces_endpoint: endpoint,
            logs_endpoint,
            service_instance_id: format!("{}-{}", hostname(get("HOSTNAME")), std::process::id()),
            ..Self::default()
        };
        let mut service_name = None;
        if let Some(raw) = get("OTEL_RESOURCE_ATTRIBUTES") {
            for (key, value) in parse_resource_attributes(raw)? {
                match key.as_str() {
                    "service.name" => service_name = Some(value),
                    "service.version" => config.service_version = value,
                    "service.instance.id" => config.service_instance_id = value,
                    _ => config.resource_attributes.push((key, value)),
                }
            }
        }
        if let Some(name) = get("OTEL_SERVICE_NAME").map(str::to_owned).or(service_name) {
            config.service_name = name;
        }

        for var in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = get(var) {
                check_protocol(var, protocol)?;
                // The signal's own variable wins over the general one.
                break;
            }
        }
        for var in [
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ] {
            if let Some(ms) = get(var) {
                config.timeout = ms
                    .parse::<u64>()
                    .ok()
                    .filter(|&ms| ms > 0)
                    .map(Duration::from_millis)
                    .ok_or_else(|| OtelConfigError {
                        var,
                        value: ms.to_owned(),
                        reason: "expected a positive number of milliseconds",
                    })?;
                break;
            }
        }
        config.sampler = parse_sampler(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))?;
        check_compression(&get)?;
        check_headers(&get)?;
        config.batch = parse_batch(&get)?;
        Ok(config)
    }

    /// Whether spans are exported.
    pub fn is_enabled(&self) -> bool {
        self.traces_endpoint.is_some()
    }
}

/// `base` + `/v1/traces`, as the specification builds a signal's URL from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn signal_url(var: &'static str, base: &str) -> Result<String, OtelConfigError> {
    check_url(var, base)?;
    Ok(format!("{}/{TRACES_PATH}", base.trim_end_matches('/')))
}

#[cfg(not(feature = "otlp"))]
fn check_url(var: &'static str, url: &str) -> Result<(), OtelConfigError> {
    Err(OtelConfigError {
        var,
        value: shown_url(url, crate::secret::redacted_url),
        reason: "this build exports no traces: it was built without the `otlp` feature \
                 (of mcp-cluster, or of mcp-cluster-telemetry)",
    })
}

#[cfg(feature = "otlp")]
fn check_url(var: &'static str, url: &str) -> Result<(), OtelConfigError> {
    let invalid = |reason| OtelConfigError {
        var,
        value: shown_url(url, crate::secret::redacted_url),
        reason,
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| OtelConfigError {
        var,
        value: shown_url(url, crate::secret::url_scheme_and_host),
        reason: "not a URL",
    })?;
    match parsed.scheme() {
        "http" if parsed.host().is_some() => Ok(()),
        "http" => Err(invalid("no host")),
        "https" => Err(invalid(
            "https is not built in (no TLS client): export to a collector over http, which forwards over TLS",
        )),
        _ => Err(invalid("expected an http:// URL")),
    }
}

/// An endpoint as an error shows it: as given when it has no `@`, `?` or
/// `#` (nothing in it stands where a password goes: user info, query), else
/// through `redact` (a password in it never shows).
fn shown_url(url: &str, redact: fn(&str) -> String) -> String {
    if url.contains(['@', '?', '#']) {
        redact(url)
    } else {
        url.to_owned()
    }
}

fn check_protocol(var: &'static str, protocol: &str) -> Result<(), OtelConfigError> {
    let reason = match protocol {
        "http/protobuf" => return Ok(()),
        "grpc" => {
            "gRPC is not built in: use http/protobuf (the collector's OTLP/HTTP port, 4318 by default)"
        }
        "http/json" => "http/json is not built in: use http/protobuf",
        _ => "unknown protocol: use http/protobuf",
    };
    Err(OtelConfigError {
        var,
        value: protocol.to_owned(),
        reason,
    })
}

fn parse_sampler(name: Option<&str>, arg: Option<&str>) -> Result<SamplerConfig, OtelConfigError> {
    let ratio = || -> Result<f64, OtelConfigError> {
        match arg {
            // The specification's default ratio.
            None => Ok(1.0),
            Some(raw) => raw
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| OtelConfigError {
                    var: "OTEL_TRACES_SAMPLER_ARG",
                    value: raw.to_owned(),
                    reason: "expected a ratio between 0 and 1",
                }),
        }
    };
    Ok(match name.unwrap_or("parentbased_always_on") {
        "always_on" => SamplerConfig::AlwaysOn,
        "always_off" => SamplerConfig::AlwaysOff,
        "traceidratio" => SamplerConfig::TraceIdRatio(ratio()?),
        "parentbased_always_on" => SamplerConfig::ParentBasedAlwaysOn,
        "parentbased_always_off" => SamplerConfig::ParentBasedAlwaysOff,
        "parentbased_traceidratio" => SamplerConfig::ParentBasedTraceIdRatio(ratio()?),
        other => {
            return Err(OtelConfigError {
                var: "OTEL_TRACES_SAMPLER",
                value: other.to_owned(),
                reason: "expected always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio",
            });
        }
    })
}

/// The first of `vars` (a signal's own variable, then the general one)
/// that is set, with its value.
fn first<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    vars: [&'static str; 2],
) -> Option<(&'static str, &'a str)> {
    vars.into_iter().find_map(|var| get(var).map(|v| (var, v)))
}

/// `OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION`: only `none` is built in.
fn check_compression<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<(), OtelConfigError> {
    let Some((var, value)) = first(
        get,
        [
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ],
    ) else {
        return Ok(());
    };
    let reason = match value {
        "none" => return Ok(()),
        "gzip" | "zstd" => "compression is not built in: leave it unset or none",
        _ => "unknown compression: expected none (gzip and zstd are not built in)",
    };
    Err(OtelConfigError {
        var,
        value: value.to_owned(),
        reason,
    })
}

/// `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`: `key=value` pairs, comma-separated,
/// values percent-encoded, each a valid HTTP header. The value is not
/// repeated in the error: it may hold an API key.
fn check_headers<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<(), OtelConfigError> {
    let Some((var, raw)) = first(
        get,
        [
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ],
    ) else {
        return Ok(());
    };
    let invalid = |reason| OtelConfigError {
        var,
        value: "(not shown)".to_owned(),
        reason,
    };
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| invalid("expected key=value pairs, comma-separated"))?;
        // Without the exporter, no header is sent: its form is not checked.
        #[cfg(not(feature = "otlp"))]
        let _ = key;
        #[cfg(feature = "otlp")]
        reqwest::header::HeaderName::from_bytes(key.trim().as_bytes())
            .map_err(|_| invalid("a key is not an HTTP header name"))?;
        let value = percent_decode(value.trim())
            .ok_or_else(|| invalid("a value has bad percent-encoding"))?;
        if value.is_empty() {
            return Err(invalid("a header has an empty value"));
        }
        #[cfg(feature = "otlp")]
        reqwest::header::HeaderValue::from_str(&value)
            .map_err(|_| invalid("a value is not a valid HTTP header value"))?;
    }
    Ok(())
}

/// The `OTEL_BSP_*` variables: whole positive numbers (milliseconds for
/// the delay and the timeout), the batch no larger than the queue.
fn parse_batch<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<BatchSettings, OtelConfigError> {
    let positive =
        |var: &'static str, reason: &'static str| -> Result<Option<u64>, OtelConfigError> {
            get(var)
                .map(|raw| {
                    raw.parse::<u64>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| OtelConfigError {
                            var,
                            value: raw.to_owned(),
                            reason,
                        })
                })
                .transpose()
        };
    const MS: &str = "expected a positive number of milliseconds";
    const COUNT: &str = "expected a positive whole number";
    let schedule_delay = positive("OTEL_BSP_SCHEDULE_DELAY", MS)?.map(Duration::from_millis);
    positive("OTEL_BSP_EXPORT_TIMEOUT", MS)?;
    let to_count = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let max_queue_size = positive("OTEL_BSP_MAX_QUEUE_SIZE", COUNT)?.map(to_count);
    let max_export_batch_size = positive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", COUNT)?.map(to_count);
    if let Some(batch) = max_export_batch_size
        && batch > max_queue_size.unwrap_or(DEFAULT_MAX_QUEUE_SIZE)
    {
        return Err(OtelConfigError {
            var: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
            value: batch.to_string(),
            reason: "larger than OTEL_BSP_MAX_QUEUE_SIZE (2048 unless set)",
        });
    }
    Ok(BatchSettings {
        schedule_delay,
        max_queue_size,
        max_export_batch_size,
    })
}

/// `key1=value1,key2=value2`, values percent-encoded (W3C Baggage octets).
fn parse_resource_attributes(raw: &str) -> Result<Vec<(String, String)>, OtelConfigError> {
    let invalid = |reason| OtelConfigError {
        var: "OTEL_RESOURCE_ATTRIBUTES",
        value: raw.to_owned(),
        reason,
    };
    let mut out = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| invalid("expected key=value pairs"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(invalid("empty key"));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| invalid("bad percent-encoding"))?;
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The host's name: `HOSTNAME` when given, else the kernel's, else
/// `localhost`.
fn hostname(env: Option<&str>) -> String {
    env.map(str::to_owned)
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(feature = "otlp")]
impl SamplerConfig {
    fn sampler(self) -> Sampler {
        match self {
            Self::AlwaysOn => Sampler::AlwaysOn,
            Self::AlwaysOff => Sampler::AlwaysOff,
            Self::TraceIdRatio(r) => Sampler::TraceIdRatioBased(r),
            Self::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
            Self::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
            Self::ParentBasedTraceIdRatio(r) => {
                Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r)))
            }
        }
    }
}

/// The tracer provider `config` describes: OTLP/HTTP protobuf through a
/// batch span processor (its own thread; `OTEL_BSP_*` tune it). `None` when
/// traces are off.
///
/// # Errors
/// The exporter could not be built.
pub(crate) fn provider(config: &OtelConfig) -> Result<Option<SdkTracerProvider>, String> {
    let Some(endpoint) = &config.traces_endpoint else {
        return Ok(None);
    };
    exporting(config, endpoint)
}

/// Refuses: this build has no exporter (`OtelConfig::from_env` refuses an
/// endpoint already).
#[cfg(not(feature = "otlp"))]
fn exporting(_: &OtelConfig, endpoint: &str) -> Result<Option<SdkTracerProvider>, String> {
    Err(format!(
        "cannot export traces to {endpoint}: built without the `otlp` feature"
    ))
}

/// The provider of log records (the audit trail's), exporting to
/// `logs_endpoint`; `None` when it is off.
///
/// # Errors
/// The exporter could not be built.
#[cfg(feature = "otlp")]
pub(crate) fn logger_provider(
    config: &OtelConfig,
) -> Result<Option<opentelemetry_sdk::logs::SdkLoggerProvider>, String> {
    let Some(endpoint) = &config.logs_endpoint else {
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::LogExporter::builder()
        .with_http()
        .with_http_client(BlockingHttp::new(config.timeout)?)
        .with_endpoint(endpoint.clone())
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(config.timeout)
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Some(
        opentelemetry_sdk::logs::SdkLoggerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource(config))
            .build(),
    ))
}

/// No exporter in this build: no log records.
#[cfg(not(feature = "otlp"))]
pub(crate) fn logger_provider(
    _: &OtelConfig,
) -> Result<Option<opentelemetry_sdk::logs::SdkLoggerProvider>, String> {
    Ok(None)
}

/// The provider exporting to `endpoint`.
#[cfg(feature = "otlp")]
fn exporting(config: &OtelConfig, endpoint: &str) -> Result<Option<SdkTracerProvider>, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(BlockingHttp::new(config.timeout)?)
        .with_endpoint(endpoint.to_owned())
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(config.timeout)
        .build()
        .map_err(|err| err.to_string())?;
    Ok(Some(
        SdkTracerProvider::builder()
            .with_span_processor(
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(batch_config(config.batch))
                    .build(),
            )
            .with_sampler(config.sampler.sampler())
            .with_resource(resource(config))
            .build(),
    ))
}

/// What every span and log record says of the node: its service, version
/// and instance, and `OTEL_RESOURCE_ATTRIBUTES`.
#[cfg(feature = "otlp")]
fn resource(config: &OtelConfig) -> Resource {
    let mut attributes = vec![
        KeyValue::new("service.version", config.service_version.clone()),
        KeyValue::new("service.instance.id", config.service_instance_id.clone()),
    ];
    attributes.extend(
        config
            .resource_attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );
    // Empty builder: the SDK's own detectors would read the process
    // environment again, and pick `unknown_service` over our default.
    Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attributes(attributes)
        .with_service_name(config.service_name.clone())
        .build()
}

#[cfg(feature = "otlp")]
/// The batch processor's configuration: the SDK's (which reads the same
/// variables, skipping values it cannot parse), with every value checked
/// here set over it.
fn batch_config(settings: BatchSettings) -> opentelemetry_sdk::trace::BatchConfig {
    let mut builder = BatchConfigBuilder::default();
    if let Some(delay) = settings.schedule_delay {
        builder = builder.with_scheduled_delay(delay);
    }
    if let Some(size) = settings.max_queue_size {
        builder = builder.with_max_queue_size(size);
    }
    if let Some(size) = settings.max_export_batch_size {
        builder = builder.with_max_export_batch_size(size);
    }
    builder.build()
}

#[cfg(feature = "otlp")]
/// The OTLP exporter's HTTP client: the workspace's reqwest, blocking. The
/// batch span processor calls it from its own thread, outside any tokio
/// runtime; the blocking client runs its own. No TLS (see the module doc).
#[derive(Debug)]
struct BlockingHttp(reqwest::blocking::Client);

#[cfg(feature = "otlp")]
impl BlockingHttp {
    fn new(timeout: Duration) -> Result<Self, String> {
        // Built on a thread of its own: building (and dropping) a blocking
        // client inside an async runtime panics, and a library caller may
        // be inside one.
        std::thread::spawn(move || {
            reqwest::blocking::Client::builder()
                .timeout(timeout)
                .build()
        })
        .join()
        .map_err(|_| "the HTTP client could not be built".to_owned())?
        .map(Self)
        .map_err(|err| format!("the HTTP client could not be built: {err}"))
    }
}

#[cfg(feature = "otlp")]
#[async_trait]
impl HttpClient for BlockingHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        use std::io::Read;

        let (parts, body) = request.into_parts();
        let response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut bytes = Vec::new();
        response.take(MAX_RESPONSE_BYTES).read_to_end(&mut bytes)?;
        let mut out = Response::new(Bytes::from(bytes));
        *out.status_mut() = status;
        *out.headers_mut() = headers;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn config(pairs: &[(&str, &str)]) -> OtelConfig {
        OtelConfig::from_env(vars(pairs), None).unwrap()
    }

    #[test]
    fn traces_are_off_without_an_endpoint() {
        let c = config(&[("PATH", "/bin"), ("OTEL_SERVICE_NAME", "x")]);
        assert!(!c.is_enabled());
        assert!(!OtelConfig::default().is_enabled());
        // An empty value is unset.
        assert!(!config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).is_enabled());
    }

    #[test]
    fn log_records_go_beside_the_traces_unless_turned_off_or_sent_elsewhere() {
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://gw/otlp/")]);
        assert_eq!(c.logs_endpoint.as_deref(), Some("http://gw/otlp/v1/logs"));
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://gw"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://logs:4318/in"),
        ]);
        assert_eq!(c.logs_endpoint.as_deref(), Some("http://logs:4318/in"));
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://gw"),
            ("OTEL_LOGS_EXPORTER", "none"),
        ]);
        assert_eq!(c.logs_endpoint, None);
        // A traces endpoint of its own names no place for logs.
        let c = config(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t/spans")]);
        assert_eq!(c.logs_endpoint, None);
        // Traces off: logs off.
        assert_eq!(config(&[]).logs_endpoint, None);
        let refused = OtelConfig::from_env(
            vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://gw"),
                ("OTEL_LOGS_EXPORTER", "console"),
            ]),
            None,
        )
        .unwrap_err();
        assert_eq!(refused.var, "OTEL_LOGS_EXPORTER");
    }

    #[test]
    fn the_general_endpoint_gets_the_traces_path() {
        for base in ["http://collector:4318", "http://collector:4318/"] {
            let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", base)]);
            assert_eq!(
                c.traces_endpoint.as_deref(),
                Some("http://collector:4318/v1/traces")
            );
        }
        let c = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://gw/otlp")]);
        assert_eq!(
            c.traces_endpoint.as_deref(),
            Some("http://gw/otlp/v1/traces")
        );
    }

    #[test]
    fn an_endpoint_error_never_shows_a_password() {
        for (endpoint, shown) in [
            (
                "https://u:s3cret@collector:4318",
                "https://u:***@collector:4318",
            ),
            (
                "ftp://collector:4318/?token=s3cret",
                "ftp://collector:4318/?token=***",
            ),
            ("http//u:s3cret@collector:4318", "(unparsable)"),
            ("collector:4318", "collector:4318"),
        ] {
            let err = OtelConfig::from_env(
                vars(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)]),
                None,
            )
            .unwrap_err();
            assert_eq!(err.value, shown, "{endpoint}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn the_signal_endpoint_is_used_as_is_and_wins() {
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://traces:4318/custom",
            ),
        ]);
        assert_eq!(
            c.traces_endpoint.as_deref(),
            Some("http://traces:4318/custom")
        );
    }

    #[test]
    fn the_flag_wins_over_the_variables() {
        let c = OtelConfig::from_env(
            vars(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://env:4318/v1/traces",
            )]),
            Some("http://flag:4318"),
        )
        .unwrap();
        assert_eq!(
            c.traces_endpoint.as_deref(),
            Some("http://flag:4318/v1/traces")
        );
    }

    #[test]
    fn sdk_disabled_or_exporter_none_turns_traces_off() {
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let c = OtelConfig::from_env(
                vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), off]),
                Some("http://flag:4318"),
            )
            .unwrap();
            assert!(!c.is_enabled(), "{off:?}");
        }
        let c = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "false"),
            ("OTEL_TRACES_EXPORTER", "otlp"),
        ]);
        assert!(c.is_enabled());
    }

    #[test]
    fn unsupported_values_are_refused_with_the_variable_named() {
        let refused =
            |pairs: &[(&str, &str)]| OtelConfig::from_env(vars(pairs), None).unwrap_err().var;
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(
            refused(&[on, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            "OTEL_EXPORTER_OTLP_PROTOCOL"
        );
        assert_eq!(
            refused(&[on, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")]),
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
        );
        assert_eq!(
            refused(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318")]),
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        );
        assert_eq!(
            refused(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")]),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        );
        assert_eq!(
            refused(&[on, ("OTEL_TRACES_EXPORTER", "zipkin")]),
            "OTEL_TRACES_EXPORTER"
        );
        assert_eq!(
            refused(&[on, ("OTEL_TRACES_SAMPLER", "sometimes")]),
            "OTEL_TRACES_SAMPLER"
        );
        assert_eq!(
            refused(&[
                on,
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2")
            ]),
            "OTEL_TRACES_SAMPLER_ARG"
        );
        assert_eq!(
            refused(&[on, ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")]),
            "OTEL_EXPORTER_OTLP_TIMEOUT"
        );
        // The signal's protocol wins over the general one.
        let c = config(&[
            on,
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ]);
        assert!(c.is_enabled());
        // Nothing else is checked while traces are off.
        let off = config(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_RESOURCE_ATTRIBUTES", "novalue"),
        ]);
        assert_eq!(off, OtelConfig::default());
    }

    #[test]
    fn compression_headers_and_batch_values_are_checked() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        let refused =
            |pair: (&str, &str)| OtelConfig::from_env(vars(&[on, pair]), None).unwrap_err();
        for (var, value) in [
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "bogus"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd"),
            ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
            ("OTEL_BSP_SCHEDULE_DELAY", "0"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "-1"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "many"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096"),
        ] {
            let err = refused((var, value));
            assert_eq!((err.var, err.value.as_str()), (var, value));
        }
        for headers in [
            "garbage",
            "api-key=secret,garbage",
            "bad key=v",
            "k=%zz",
            "k=",
            "k=line%0Abreak",
        ] {
            let err = refused(("OTEL_EXPORTER_OTLP_HEADERS", headers));
            assert_eq!(err.var, "OTEL_EXPORTER_OTLP_HEADERS", "{headers}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        assert_eq!(
            refused(("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x")).var,
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
        );

        let c = config(&[
            on,
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%3Db, x-tenant=7"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_EXPORT_TIMEOUT", "3000"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "8192"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4096"),
        ]);
        assert_eq!(
            c.batch,
            BatchSettings {
                schedule_delay: Some(Duration::from_millis(100)),
                max_queue_size: Some(8192),
                max_export_batch_size: Some(4096),
            }
        );
        // The signal's own variable is the one checked.
        assert!(
            config(&[
                on,
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
                ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none"),
            ])
            .is_enabled()
        );
        // Off: not checked.
        assert_eq!(
            config(&[("OTEL_BSP_SCHEDULE_DELAY", "soon")]),
            OtelConfig::default()
        );
    }

    #[test]
    fn samplers_and_timeouts_parse() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        assert_eq!(config(&[on]).sampler, SamplerConfig::ParentBasedAlwaysOn);
        let c = config(&[
            on,
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ]);
        assert_eq!(c.sampler, SamplerConfig::ParentBasedTraceIdRatio(0.25));
        assert_eq!(c.timeout, Duration::from_millis(2500));
        let c = config(&[on, ("OTEL_TRACES_SAMPLER", "traceidratio")]);
        assert_eq!(c.sampler, SamplerConfig::TraceIdRatio(1.0));
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn service_identity_follows_the_specification_precedence() {
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318");
        let c = config(&[on, ("HOSTNAME", "pod-7")]);
        assert_eq!(c.service_name, DEFAULT_SERVICE_NAME);
        assert_eq!(c.service_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(
            c.service_instance_id,
            format!("pod-7-{}", std::process::id())
        );

        let c = config(&[
            on,
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=from-attrs, deployment.environment.name=prod,team=a%2Cb,service.instance.id=i-1",
            ),
        ]);
        assert_eq!(c.service_name, "from-attrs");
        assert_eq!(c.service_instance_id, "i-1");
        assert_eq!(
            c.resource_attributes,
            vec![
                ("deployment.environment.name".to_owned(), "prod".to_owned()),
                ("team".to_owned(), "a,b".to_owned()),
            ]
        );

        let c = config(&[
            on,
            ("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs"),
            ("OTEL_SERVICE_NAME", "from-name"),
        ]);
        assert_eq!(c.service_name, "from-name");

        assert_eq!(
            OtelConfig::from_env(vars(&[on, ("OTEL_RESOURCE_ATTRIBUTES", "novalue")]), None)
                .unwrap_err()
                .var,
            "OTEL_RESOURCE_ATTRIBUTES"
        );
    }
}
