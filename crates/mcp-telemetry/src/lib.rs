//! Telemetry of an MCP node: logging setup and the names of spans.
//!
//! Only the node (through `mcp-server`) installs a subscriber; libraries emit
//! `tracing` events with the span names defined here.
//!
//! # Layout
//! - [`spans`]: span names.
//! - [`init_logging`]: the `tracing` subscriber (text or JSON, env filter).

pub mod spans {
    //! Span names, written once.

    /// One HTTP request: fields `method`, `route`.
    pub const HTTP_REQUEST: &str = "http_request";
    /// One MCP session: field `session_id`.
    pub const MCP_SESSION: &str = "mcp_session";
    /// One JSON-RPC request: fields `jsonrpc_id`, `method`.
    pub const MCP_REQUEST: &str = "mcp_request";
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global `tracing` subscriber, writing to stderr (stdout may
/// carry the protocol, as in stdio mode). `filter` uses `EnvFilter` syntax,
/// e.g. `info,mcp_runtime=debug`.
///
/// # Errors
/// A subscriber is already installed, or the filter does not parse.
pub fn init_logging(
    format: LogFormat,
    filter: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = tracing_subscriber::EnvFilter::try_new(quiet_client_errors(filter))?;
    // Colours only for a terminal, never into log files or collectors.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
}

/// actix-http logs every malformed request it cannot parse at ERROR
/// ("stream error: request parse error"): a client can flood the log, and
/// an operator has nothing to act on. Those lines are off unless the filter
/// names `actix_http` itself.
fn quiet_client_errors(filter: &str) -> String {
    if filter.contains("actix_http") {
        filter.to_owned()
    } else if filter.trim().is_empty() {
        "actix_http::h1::dispatcher=off".to_owned()
    } else {
        format!("{filter},actix_http::h1::dispatcher=off")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_parse_errors_are_off_unless_asked_for() {
        assert_eq!(
            quiet_client_errors("info"),
            "info,actix_http::h1::dispatcher=off"
        );
        assert_eq!(quiet_client_errors(""), "actix_http::h1::dispatcher=off");
        assert_eq!(
            quiet_client_errors("info,actix_http=debug"),
            "info,actix_http=debug"
        );
        for filter in ["info", "", "warn,mcp_runtime=debug"] {
            tracing_subscriber::EnvFilter::try_new(quiet_client_errors(filter)).unwrap();
        }
    }
}
