//! A node's command line, for `mcp-node` and for a provider's own binary
//! alike: [`run`] gives a program every flag, environment variable and
//! configuration-file key of `mcp-node` (README, "Flags and environment
//! variables"), its exit codes and its log and trace setup, around the
//! provider's [`McpServer`]. So the Dockerfile pattern, docker-compose.yml
//! and the Helm chart serve a provider's image with only the image changed.
//!
//! ```no_run
//! use mcp_cluster::{McpServer, ServerBuilder, cli};
//!
//! fn server(config: &mcp_cluster::NodeConfig) -> McpServer {
//!     ServerBuilder::new("my-tools", env!("CARGO_PKG_VERSION"))
//!         .page_size(config.page_size)
//!         .build()
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     cli::run(cli::Program::new("my-tools", env!("CARGO_PKG_VERSION")), server)
//! }
//! ```
//!
//! Exit codes: 0 after a clean drain (or `--help`, `--version`), 64 for bad
//! configuration (one line on stderr naming the flag, variable or file), 1
//! when serving failed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{CommandFactory, FromArgMatches, Parser};
use mcp_cluster_telemetry::{LogFormat, OtelConfig};

use crate::config::UnknownVar;
use crate::{McpServer, NodeConfig, Served};

/// Exit code for bad configuration (EX_USAGE).
pub const EXIT_CONFIG: u8 = 64;

/// What a program says of itself: its name (in `--help`, in error lines and
/// in the `<name> listening on <url>` line scripts read), its version
/// (`--version`) and a line of description (`--help`).
#[derive(Debug, Clone)]
pub struct Program {
    name: &'static str,
    version: &'static str,
    about: &'static str,
}

impl Program {
    /// A program named `name` at `version` (`env!("CARGO_PKG_VERSION")`).
    pub fn new(name: &'static str, version: &'static str) -> Self {
        Self {
            name,
            version,
            about: "",
        }
    }

    /// The line `--help` starts with.
    #[must_use]
    pub fn about(mut self, about: &'static str) -> Self {
        self.about = about;
        self
    }

    /// The command line definition under this program's name.
    fn command(&self) -> clap::Command {
        let command = Cli::command()
            .name(self.name)
            .bin_name(self.name)
            .version(self.version);
        if self.about.is_empty() {
            command
        } else {
            command.about(self.about)
        }
    }
}

/// The flags (and their variables) of a node.
#[derive(Debug, Parser)]
struct Cli {
    /// TOML configuration file; flags and environment variables override it.
    #[arg(long, env = "MCP_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "MCP_BIND")]
    bind: Option<SocketAddr>,
    /// Redis URL: join the cluster sharing this Redis (without it the node
    /// runs alone on the embedded in-memory store).
    #[arg(long, env = "MCP_REDIS_URL")]
    redis_url: Option<String>,
    /// PEM file of the CA certificates that sign Redis's certificate
    /// (`rediss://`), instead of the system's roots [default: none].
    #[arg(long, env = "MCP_REDIS_CA_FILE")]
    redis_ca_file: Option<PathBuf>,
    /// PEM client certificate presented to Redis (`rediss://`, with
    /// --redis-client-key) [default: none].
    #[arg(long, env = "MCP_REDIS_CLIENT_CERT", requires = "redis_client_key")]
    redis_client_cert: Option<PathBuf>,
    /// PEM private key of --redis-client-cert [default: none].
    #[arg(long, env = "MCP_REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    redis_client_key: Option<PathBuf>,
    /// File holding Redis's password (for the URL's user), instead of a
    /// password in the URL [default: none].
    #[arg(long, env = "MCP_REDIS_PASSWORD_FILE")]
    redis_password_file: Option<PathBuf>,
    /// Serve HTTPS on the main listener with this PEM certificate chain
    /// (with --tls-key); reloaded when the file changes [default: none].
    #[arg(long, env = "MCP_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert [default: none].
    #[arg(long, env = "MCP_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve one session over stdin/stdout instead of HTTP.
    #[arg(long)]
    stdio: bool,
    /// Allowed Origin values, comma-separated (`scheme://host[:port]`,
    /// port `*` for any, or `*`) [default: loopback origins].
    #[arg(long, env = "MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    allowed_origins: Option<Vec<String>>,
    /// Allowed Host values, comma-separated (`host[:port]`, port `*` for
    /// any, or `*`) [default: loopback hosts].
    #[arg(long, env = "MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Option<Vec<String>>,
    /// Seconds an idle session lives [default: 1800].
    #[arg(long, env = "MCP_SESSION_TTL_SECS")]
    session_ttl_secs: Option<u64>,
    /// Seconds an idle session's actor runs before it passivates (its
    /// record stays in the store; its next request starts it again); 0
    /// never [default: 30].
    #[arg(long, env = "MCP_SESSION_PASSIVATE_SECS")]
    session_passivate_secs: Option<u64>,
    /// Most live sessions on this node [default: 10000].
    #[arg(long, env = "MCP_MAX_SESSIONS")]
    max_sessions: Option<usize>,
    /// Most in-flight requests per session [default: 64].
    #[arg(long, env = "MCP_MAX_IN_FLIGHT")]
    max_in_flight: Option<usize>,
    /// Largest request body in bytes [default: 4194304].
    #[arg(long, env = "MCP_MAX_BODY_BYTES")]
    max_body_bytes: Option<usize>,
    /// Seconds a request may run [default: 600].
    #[arg(long, env = "MCP_REQUEST_TIMEOUT_SECS")]
    request_timeout_secs: Option<u64>,
    /// Answer every request as an SSE stream (`sse`) or JSON until the
    /// handler emits a notification (`auto`) [default: auto].
    #[arg(long, env = "MCP_RESPONSE_MODE", value_parser = ["auto", "sse"])]
    response_mode: Option<String>,
    /// HTTP worker threads, 0 for one per core [default: 0].
    #[arg(long, env = "MCP_WORKERS")]
    workers: Option<usize>,
    /// Seconds in-flight requests get after SIGTERM [default: 30].
    #[arg(long, env = "MCP_DRAIN_GRACE_SECS")]
    drain_grace_secs: Option<u64>,
    /// Seconds a draining node goes on serving as usual (readiness
    /// failing) before its listener refuses new connections [default: 5].
    #[arg(long, env = "MCP_DRAIN_DELAY_SECS")]
    drain_delay_secs: Option<u64>,
    /// Listener for /healthz, /readyz and /metrics only, outside the
    /// connection limits of the main one; /metrics is then served there
    /// only [default: none].
    #[arg(long, env = "MCP_ADMIN_BIND")]
    admin_bind: Option<SocketAddr>,
    /// Seconds an idle keep-alive connection stays open [default: 5].
    #[arg(long, env = "MCP_KEEP_ALIVE_SECS")]
    keep_alive_secs: Option<u64>,
    /// Seconds a request's whole body may take to arrive [default: 30].
    #[arg(long, env = "MCP_REQUEST_BODY_TIMEOUT_SECS")]
    request_body_timeout_secs: Option<u64>,
    /// Seconds an SSE stream may hold bytes its client does not take
    /// before the node closes its connection [default: 30].
    #[arg(long, env = "MCP_SSE_WRITE_STALL_TIMEOUT_SECS")]
    sse_write_stall_timeout_secs: Option<u64>,
    /// Most connections the node holds (two descriptors each), 0 for half
    /// the open-file limit less a reserve [default: 0].
    #[arg(long, env = "MCP_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Most connections per client address, at most a quarter of the
    /// node's (0 for that quarter) [default: 512].
    #[arg(long, env = "MCP_MAX_CONNECTIONS_PER_PEER")]
    max_connections_per_peer: Option<usize>,
    /// Addresses or networks exempt from the per-address limit,
    /// comma-separated [default: 127.0.0.1,::1].
    #[arg(long, env = "MCP_CONNECTION_LIMIT_EXEMPT", value_delimiter = ',')]
    connection_limit_exempt: Option<Vec<String>>,
    /// Proxies (addresses or networks) whose X-Forwarded-For names the
    /// client quotas count, comma-separated [default: 127.0.0.1,::1].
    #[arg(long, env = "MCP_TRUSTED_PROXIES", value_delimiter = ',')]
    trusted_proxies: Option<Vec<String>>,
    /// New sessions per client address per `quotas.initialize_window_secs`
    /// (60 s) for requests without a principal, 0 for no limit
    /// [default: 60].
    #[arg(long, env = "MCP_QUOTA_INITIALIZE_PER_ADDRESS")]
    quota_initialize_per_address: Option<u32>,
    /// Requests and notifications per principal per
    /// `quotas.requests_window_secs` (60 s), 0 for no limit [default: 1200].
    #[arg(long, env = "MCP_QUOTA_REQUESTS_PER_PRINCIPAL")]
    quota_requests_per_principal: Option<u32>,
    /// Requests per client address per `quotas.requests_window_secs` (60
    /// s) for requests without a principal, refused ones included,
    /// cluster-wide, 0 for no limit [default: 1200].
    #[arg(long, env = "MCP_QUOTA_REQUESTS_PER_ADDRESS")]
    quota_requests_per_address: Option<u32>,
    /// Open sessions per principal, cluster-wide, 0 for no limit
    /// [default: 100].
    #[arg(long, env = "MCP_QUOTA_SESSIONS_PER_PRINCIPAL")]
    quota_sessions_per_principal: Option<u32>,
    /// Open SSE streams (GET, resumptions, legacy /sse) per principal,
    /// cluster-wide, 0 for no limit [default: 100].
    #[arg(long, env = "MCP_QUOTA_STREAMS_PER_PRINCIPAL")]
    quota_streams_per_principal: Option<u32>,
    /// Open SSE streams (GET, resumptions, legacy /sse) of sessions
    /// without a principal per client address, cluster-wide, 0 for no
    /// limit [default: 100].
    #[arg(long, env = "MCP_QUOTA_STREAMS_PER_ADDRESS")]
    quota_streams_per_address: Option<u32>,
    /// Open subscriptions/listen streams per client address, for requests
    /// without a principal, cluster-wide, 0 for no limit [default: 100].
    #[arg(long, env = "MCP_QUOTA_LISTEN_STREAMS_PER_ADDRESS")]
    quota_listen_streams_per_address: Option<u32>,
    /// Running tasks per principal, cluster-wide, 0 for no limit
    /// [default: 100].
    #[arg(long, env = "MCP_QUOTA_TASKS_PER_PRINCIPAL")]
    quota_tasks_per_principal: Option<u32>,
    /// Running tasks per client address, for requests without a
    /// principal, cluster-wide, 0 for no limit [default: 100].
    #[arg(long, env = "MCP_QUOTA_TASKS_PER_ADDRESS")]
    quota_tasks_per_address: Option<u32>,
    /// Bytes one client's running requests may hold on this node (their
    /// parameters, their open answer streams), per principal, else per
    /// client address; more gets 429; 0 for no limit [default: 8388608].
    #[arg(long, env = "MCP_QUOTA_IN_FLIGHT_BYTES_PER_CLIENT")]
    quota_in_flight_bytes_per_client: Option<u64>,
    /// Items per page of tools/list, resources/list, resources/templates/list
    /// and prompts/list [default: 100].
    #[arg(long, env = "MCP_PAGE_SIZE")]
    page_size: Option<usize>,
    /// A folder of skills to serve (the Skills extension): each folder
    /// under it holding a SKILL.md is one, at skill://<its path>/SKILL.md.
    #[arg(long, env = "MCP_SKILLS_DIR")]
    skills_dir: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax; the access log is the target
    /// `mcp_access`); without it, `RUST_LOG` [default: info].
    #[arg(long, env = "MCP_LOG")]
    log: Option<String>,
    /// Log as JSON lines (the variable takes true/false, 1/0, yes/no,
    /// on/off).
    #[arg(long, env = "MCP_LOG_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    log_json: bool,
    /// Export traces over OTLP/HTTP to this collector (base URL, `/v1/traces`
    /// is appended); overrides `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`.
    /// Traces are off without an endpoint; the other `OTEL_*` variables
    /// apply [default: none].
    #[arg(long, env = "MCP_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

impl Cli {
    /// Defaults, then the file, then `MCP_<SECTION>__<KEY>` variables, then
    /// flags (and their own variables). Also returns the `MCP_*` variables
    /// that name nothing, to be reported.
    fn config(
        &self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> anyhow::Result<(NodeConfig, Vec<UnknownVar>)> {
        let file = match &self.config {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("--config {}", path.display()))?,
            ),
            None => None,
        };
        let flag_vars = flag_vars();
        let flag_vars: Vec<&str> = flag_vars.iter().map(String::as_str).collect();
        let (mut c, unknown) =
            NodeConfig::load(file.as_deref(), env, &flag_vars).map_err(|err| {
                match &self.config {
                    // A variable's error names the variable; the file's, the file.
                    Some(path) if !err.0.starts_with("MCP_") && !err.0.starts_with("the MCP_") => {
                        anyhow::anyhow!("--config {}: {}", path.display(), err.0)
                    }
                    _ => anyhow::anyhow!("{}", err.0),
                }
            })?;
        if let Some(v) = self.bind {
            c.bind = v;
        }
        if let Some(v) = &self.allowed_origins {
            c.http.allowed_origins.clone_from(v);
        }
        if let Some(v) = &self.allowed_hosts {
            c.http.allowed_hosts.clone_from(v);
        }
        if let Some(v) = self.session_ttl_secs {
            c.runtime.session_idle_ttl_secs = v;
        }
        if let Some(v) = self.session_passivate_secs {
            c.runtime.session_passivate_secs = v;
        }
        if let Some(v) = self.max_sessions {
            c.runtime.max_sessions = v;
        }
        if let Some(v) = self.max_in_flight {
            c.runtime.max_in_flight_per_session = v;
        }
        if let Some(v) = self.max_body_bytes {
            c.http.max_body_bytes = v;
        }
        if let Some(v) = self.request_timeout_secs {
            c.runtime.request_timeout_secs = v;
        }
        if let Some(v) = &self.response_mode {
            c.runtime.response_mode = if v == "sse" {
                crate::config::ResponseMode::Sse
            } else {
                crate::config::ResponseMode::Auto
            };
        }
        if let Some(url) = &self.redis_url {
            c.redis
                .get_or_insert_with(Default::default)
                .url
                .clone_from(url);
        }
        // Each of these turns `[redis]` on, as --redis-url does.
        fn redis(c: &mut NodeConfig) -> &mut crate::config::RedisConfig {
            c.redis.get_or_insert_with(Default::default)
        }
        if let Some(v) = &self.redis_ca_file {
            redis(&mut c).ca_file = Some(v.clone());
        }
        if let Some(v) = &self.redis_client_cert {
            redis(&mut c).client_cert_file = Some(v.clone());
        }
        if let Some(v) = &self.redis_client_key {
            redis(&mut c).client_key_file = Some(v.clone());
        }
        if let Some(v) = &self.redis_password_file {
            redis(&mut c).password_file = Some(v.clone());
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            let tls = c.tls.get_or_insert_with(Default::default);
            tls.cert_file.clone_from(cert);
            tls.key_file.clone_from(key);
        }
        if let Some(v) = self.workers {
            c.workers = v;
        }
        if let Some(v) = self.drain_grace_secs {
            c.drain_grace_secs = v;
        }
        if let Some(v) = self.page_size {
            c.page_size = v;
        }
        if let Some(v) = &self.skills_dir {
            c.skills_dir = Some(v.clone());
        }
        if let Some(v) = self.drain_delay_secs {
            c.drain_delay_secs = v;
        }
        if let Some(v) = self.admin_bind {
            c.admin_bind = Some(v);
        }
        if let Some(v) = self.keep_alive_secs {
            c.http.keep_alive_secs = v;
        }
        if let Some(v) = self.request_body_timeout_secs {
            c.http.request_body_timeout_secs = v;
        }
        if let Some(v) = self.sse_write_stall_timeout_secs {
            c.http.sse_write_stall_timeout_secs = v;
        }
        if let Some(v) = self.max_connections {
            c.http.max_connections = v;
        }
        if let Some(v) = self.max_connections_per_peer {
            c.http.max_connections_per_peer = v;
        }
        if let Some(v) = &self.connection_limit_exempt {
            c.http.connection_limit_exempt.clone_from(v);
        }
        if let Some(v) = &self.trusted_proxies {
            c.http.trusted_proxies.clone_from(v);
        }
        if let Some(v) = self.quota_initialize_per_address {
            c.quotas.initialize_per_address = v;
        }
        if let Some(v) = self.quota_requests_per_principal {
            c.quotas.requests_per_principal = v;
        }
        if let Some(v) = self.quota_requests_per_address {
            c.quotas.requests_per_address = v;
        }
        if let Some(v) = self.quota_streams_per_address {
            c.quotas.streams_per_address = v;
        }
        if let Some(v) = self.quota_sessions_per_principal {
            c.quotas.sessions_per_principal = v;
        }
        if let Some(v) = self.quota_streams_per_principal {
            c.quotas.streams_per_principal = v;
        }
        if let Some(v) = self.quota_listen_streams_per_address {
            c.quotas.listen_streams_per_address = v;
        }
        if let Some(v) = self.quota_tasks_per_principal {
            c.quotas.tasks_per_principal = v;
        }
        if let Some(v) = self.quota_tasks_per_address {
            c.quotas.tasks_per_address = v;
        }
        if let Some(v) = self.quota_in_flight_bytes_per_client {
            c.quotas.in_flight_bytes_per_client = v;
        }
        c.validate()?;
        Ok((c, unknown))
    }
}

/// The variables clap reads for the flags, from the command definition (so
/// that a new flag's variable is known without another list to keep).
fn flag_vars() -> Vec<String> {
    Cli::command()
        .get_arguments()
        .filter_map(clap::Arg::get_env)
        .map(|name| name.to_string_lossy().into_owned())
        .collect()
}

/// The log filter: `--log` / `MCP_LOG`, else `RUST_LOG` (the variable
/// Rust tools share), else `info`.
fn log_filter(flag: Option<&str>, rust_log: Option<String>) -> String {
    flag.map(str::to_owned)
        .or(rust_log.filter(|f| !f.trim().is_empty()))
        .unwrap_or_else(|| "info".to_owned())
}

/// The command line and the flags' variables, parsed; `Err` is the exit
/// code to return at once: 0 after `--help` or `--version` (printed), 64
/// after any other error, said on one line naming the flag or variable.
fn parse_cli(
    program: &Program,
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<Cli, ExitCode> {
    let err = match program.command().try_get_matches_from(args) {
        Ok(matches) => match Cli::from_arg_matches(&matches) {
            Ok(cli) => return Ok(cli),
            Err(err) => err,
        },
        Err(err) => err,
    };
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        // Printing fails only on a closed stdout: nothing to say then.
        let _ = err.print();
        return Err(ExitCode::SUCCESS);
    }
    eprintln!("{}: {}", program.name, clap_error_line(&err));
    Err(ExitCode::from(EXIT_CONFIG))
}

/// clap's error on one line: its first paragraph without `error: `, its
/// tip, and the variable the bad value came from when it came from one
/// (clap names only the flag).
fn clap_error_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let mut paragraphs = rendered.split("\n\n");
    let first = paragraphs.next().unwrap_or_default();
    let mut line = first
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(rest) = line.strip_prefix("error: ") {
        line = rest.to_owned();
    }
    for tip in paragraphs
        .flat_map(str::lines)
        .map(str::trim)
        .filter(|l| l.starts_with("tip:"))
    {
        line = format!("{line} ({tip})");
    }
    if let Some(var) = variable_of(err) {
        line = format!("{var}: {line}");
    }
    line
}

/// The variable a bad value came from: the flag clap names has a variable
/// that is set, and the flag is not on the command line.
fn variable_of(err: &clap::Error) -> Option<String> {
    let clap::error::ContextValue::String(arg) = err.get(clap::error::ContextKind::InvalidArg)?
    else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let command = Cli::command();
    let var = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))?
        .get_env()?
        .to_string_lossy()
        .into_owned();
    let on_command_line = std::env::args().any(|a| {
        a.strip_prefix("--")
            .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
    });
    (!on_command_line && std::env::var_os(&var).is_some()).then_some(var)
}

/// An error on one line (a cause chain or a library's message may span
/// several): exit 64's "one clear line".
fn one_line(err: &impl std::fmt::Display) -> String {
    format!("{err:#}")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a node serving the server `make` builds from the configuration:
/// parses the command line, the `MCP_*` variables and the configuration
/// file, sets up logs and traces, serves (HTTP, or one session on stdio
/// with `--stdio`) until SIGTERM or SIGINT, drains, and returns the exit
/// code for `main` to return.
pub fn run<F>(program: Program, make: F) -> ExitCode
where
    F: FnOnce(&NodeConfig) -> McpServer,
{
    // Started as a hosted server's keeper: that alone (never returns then).
    mcp_cluster_relay::keeper::run_if_asked();
    mcp_cluster_relay::keeper::enable();
    let cli = match parse_cli(&program, std::env::args_os()) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let format = if cli.log_json {
        LogFormat::Json
    } else {
        LogFormat::Text
    };
    let otel = match OtelConfig::from_env(std::env::vars(), cli.otlp_endpoint.as_deref()) {
        Ok(otel) => otel,
        Err(err) => {
            eprintln!("{}: {err}", program.name);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // Held to the end of `main`: its shutdown exports the last spans.
    let filter = log_filter(cli.log.as_deref(), std::env::var("RUST_LOG").ok());
    let telemetry = match mcp_cluster_telemetry::init(format, &filter, &otel) {
        Ok(telemetry) => telemetry,
        Err(err) => {
            eprintln!("{}: {err}", program.name);
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let (config, unknown) = match cli.config(std::env::vars()) {
        Ok(c) => c,
        Err(err) => {
            eprintln!("{}: {}", program.name, one_line(&err));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    // Reported, not refused: an environment is shared across versions (a
    // rollout, a rollback) and with other programs (README, "Flags and
    // environment variables").
    for var in &unknown {
        match &var.suggestion {
            Some(known) => tracing::warn!(
                variable = %var.name,
                did_you_mean = %known,
                "Unknown MCP_ environment variable ignored."
            ),
            None => tracing::warn!(
                variable = %var.name,
                "Unknown MCP_ environment variable ignored."
            ),
        }
    }
    tracing::info!(config = ?config, "Effective configuration.");
    if let Err(err) = check_files(&config, cli.stdio) {
        eprintln!("{}: {}", program.name, one_line(&err));
        return ExitCode::from(EXIT_CONFIG);
    }
    if config.skills_dir.is_some() && !config.upstreams.is_empty() {
        eprintln!(
            "{}: skills_dir serves skills beside the node's own server; a node hosting an upstream serves the upstream's",
            program.name
        );
        return ExitCode::from(EXIT_CONFIG);
    }
    let skills = match config.skills_dir.as_deref().map(crate::skill::skills_in) {
        None => Vec::new(),
        Some(Ok(skills)) => skills,
        Some(Err(err)) => {
            eprintln!("{}: {}", program.name, one_line(&err));
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    raise_fd_limit(config.runtime.max_sessions);
    let make = move |config: &NodeConfig| {
        let server = make(config);
        if !skills.is_empty() {
            tracing::info!(skills = skills.len(), "Serving skills.");
            server.add_skills(skills);
        }
        server
    };
    let result = actix_web::rt::System::new().block_on(serve(&program, make, cli.stdio, config));
    // The spans of the drain's last requests go out before the process
    // ends (waits up to 5 s for the collector).
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A setting found wrong only once the node runs (two federated
        // upstreams exposing one name).
        Err(err) if err.kind() == std::io::ErrorKind::InvalidInput => {
            eprintln!("{}: {err}", program.name);
            ExitCode::from(EXIT_CONFIG)
        }
        Err(err) => {
            eprintln!("{}: {err}", program.name);
            ExitCode::FAILURE
        }
    }
}

/// Reads the files the configuration names (the TLS certificate and key,
/// Redis's password, CA and client certificate files), so that a missing or
/// bad one exits with 64 and one line like any other bad setting. The node
/// reads them again when it starts, and later when they change.
fn check_files(config: &NodeConfig, stdio: bool) -> anyhow::Result<()> {
    #[cfg(feature = "tls")]
    if let Some(tls) = config.tls.as_ref().filter(|_| !stdio) {
        crate::tls::ReloadingCert::load(tls)?;
    }
    #[cfg(not(feature = "tls"))]
    let _ = stdio;
    if let Some(redis) = &config.redis {
        crate::features::check_redis_files(redis)?;
    }
    Ok(())
}

/// Every session with an open stream holds a connection, and every
/// connection two descriptors (its socket and the write-stall watch's
/// handle on it): lift the soft limit on open files to the hard one, and
/// say so when it still cannot hold `max_sessions` streams.
fn raise_fd_limit(max_sessions: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < (max_sessions as u64).saturating_mul(2) => tracing::warn!(
            limit,
            max_sessions,
            "The open-file limit is below two per session (a stream's connection holds two descriptors); raise it (ulimit -n) to serve max_sessions with streams."
        ),
        Ok(limit) => tracing::debug!(limit, "Open-file limit."),
        Err(err) => tracing::warn!(%err, "Could not raise the open-file limit."),
    }
}

async fn serve(
    program: &Program,
    make: impl FnOnce(&NodeConfig) -> McpServer,
    stdio: bool,
    config: NodeConfig,
) -> std::io::Result<()> {
    // A hosted server (`[[upstreams]]`) takes the endpoint in place of the
    // binary's own; children inherit only what the upstream lists of the
    // node's environment.
    let server = match Served::hosted(&config, std::env::vars())
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err.0))?
    {
        Some(hosted) => {
            hosted
                .check_names()
                .await
                .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidInput, err.0))?;
            for upstream in &config.upstreams {
                if upstream.urls.is_empty() {
                    tracing::info!(upstream = %upstream.name, "Hosting an MCP server: one child process per session.");
                } else {
                    tracing::info!(upstream = %upstream.name, replicas = upstream.urls.len(), "Hosting an HTTP MCP server: one upstream session per session.");
                }
            }
            if config.upstreams.len() > 1 {
                tracing::info!(
                    upstreams = config.upstreams.len(),
                    "The hosted servers are federated behind one endpoint."
                );
            }
            hosted
        }
        None => make(&config).into(),
    };
    if stdio {
        return crate::stdio::run(server, config).await;
    }
    let endpoint = config.http.endpoint.clone();
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    // Binds at once; with Redis not reachable yet, waits for it (probes
    // answer meanwhile) instead of exiting.
    let node = crate::node::start(server, config).await?;
    for addr in node.addrs() {
        tracing::info!(%addr, "Listening.");
        // A machine-readable line for scripts and tests.
        println!("{} listening on {scheme}://{addr}{endpoint}", program.name);
    }
    for addr in node.admin_addrs() {
        tracing::info!(%addr, "Probes listening.");
        // Always plain HTTP, TLS or not.
        println!("{} probes on http://{addr}/healthz", program.name);
    }
    node.run().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_flag_wins_then_rust_log_then_info() {
        assert_eq!(log_filter(Some("warn"), Some("debug".into())), "warn");
        assert_eq!(
            log_filter(None, Some("debug,mcp_access=off".into())),
            "debug,mcp_access=off"
        );
        assert_eq!(log_filter(None, Some(" ".into())), "info");
        assert_eq!(log_filter(None, None), "info");
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_command_is_well_formed_and_every_flag_variable_is_known() {
        Cli::command().debug_assert();
        let vars = flag_vars();
        for name in [
            "MCP_CONFIG",
            "MCP_BIND",
            "MCP_REDIS_URL",
            "MCP_ADMIN_BIND",
            "MCP_LOG",
        ] {
            assert!(vars.iter().any(|v| v == name), "{name} missing: {vars:?}");
        }
        let cli = Cli::parse_from(["mcp-node"]);
        let (_, unknown) = cli
            .config(env(&[
                ("MCP_BIND", "127.0.0.1:1"),
                ("MCP_LOG_JSON", "true"),
            ]))
            .unwrap();
        assert_eq!(unknown, []);
    }

    #[test]
    fn tls_and_redis_file_flags_fill_their_sections() {
        let cli = Cli::parse_from([
            "mcp-node",
            "--tls-cert",
            "/etc/mcp/tls.crt",
            "--tls-key",
            "/etc/mcp/tls.key",
            "--redis-url",
            "rediss://mcp@redis.internal:6380",
            "--redis-ca-file",
            "/etc/mcp/redis-ca.pem",
            "--redis-password-file",
            "/run/secrets/redis",
        ]);
        let (config, _) = cli
            .config(env(&[("MCP_TLS__RELOAD_INTERVAL_SECS", "30")]))
            .unwrap();
        let tls = config.tls.unwrap();
        assert_eq!(tls.cert_file, PathBuf::from("/etc/mcp/tls.crt"));
        assert_eq!(tls.key_file, PathBuf::from("/etc/mcp/tls.key"));
        assert_eq!(tls.reload_interval_secs, 30);
        let redis = config.redis.unwrap();
        assert_eq!(redis.ca_file, Some(PathBuf::from("/etc/mcp/redis-ca.pem")));
        assert_eq!(
            redis.password_file,
            Some(PathBuf::from("/run/secrets/redis"))
        );
        // A certificate without its key is refused by clap.
        assert!(Cli::try_parse_from(["mcp-node", "--tls-cert", "a.pem"]).is_err());
        assert!(Cli::try_parse_from(["mcp-node", "--redis-client-key", "a.key"]).is_err());
        for name in [
            "MCP_TLS_CERT",
            "MCP_TLS_KEY",
            "MCP_REDIS_CA_FILE",
            "MCP_REDIS_PASSWORD_FILE",
        ] {
            assert!(flag_vars().iter().any(|v| v == name), "{name}");
        }
    }

    #[test]
    fn missing_tls_files_are_a_configuration_error_naming_the_file() {
        let cli = Cli::parse_from([
            "mcp-node",
            "--tls-cert",
            "/nonexistent/tls.crt",
            "--tls-key",
            "/nonexistent/tls.key",
        ]);
        let (config, _) = cli.config(env(&[])).unwrap();
        let err = check_files(&config, false).unwrap_err().to_string();
        assert!(err.contains("cert_file /nonexistent/tls.crt"), "{err}");
        // Stdio serves no HTTPS: the files are not needed.
        check_files(&config, true).unwrap();
    }

    #[test]
    fn unknown_variables_are_returned_and_bad_values_refused() {
        let cli = Cli::parse_from(["mcp-node"]);
        let (config, unknown) = cli
            .config(env(&[
                ("MCP_REDIS_ULR", "redis://127.0.0.1:1"),
                ("MCP_HTTP__MAX_BODY_BYTES", "2048"),
            ]))
            .unwrap();
        assert_eq!(config.http.max_body_bytes, 2048);
        assert!(config.redis.is_none());
        assert_eq!(unknown.len(), 1);
        assert_eq!(unknown[0].name, "MCP_REDIS_ULR");
        assert_eq!(unknown[0].suggestion.as_deref(), Some("MCP_REDIS_URL"));
        assert!(
            cli.config(env(&[("MCP_HTTP__MAX_BODY_BYTES", "big")]))
                .is_err()
        );
    }

    #[test]
    fn quota_flags_and_variables_fill_the_quotas_section() {
        let cli = Cli::parse_from([
            "mcp-node",
            "--trusted-proxies",
            "10.0.0.0/8,127.0.0.1",
            "--quota-sessions-per-principal",
            "5",
            "--quota-streams-per-principal",
            "0",
            "--quota-initialize-per-address",
            "7",
            "--quota-tasks-per-principal",
            "9",
            "--quota-listen-streams-per-address",
            "11",
            "--quota-requests-per-address",
            "640",
        ]);
        // A flag's own variable is the flag's (clap reads it), not unknown.
        let (config, unknown) = cli
            .config(env(&[
                ("MCP_QUOTA_INITIALIZE_PER_ADDRESS", "8"),
                ("MCP_QUOTAS__REQUESTS_PER_PRINCIPAL", "100"),
                ("MCP_QUOTAS__TASKS_PER_ADDRESS", "12"),
                ("MCP_QUOTAS__STREAMS_PER_ADDRESS", "13"),
            ]))
            .unwrap();
        assert_eq!(unknown, []);
        assert_eq!(config.http.trusted_proxies, ["10.0.0.0/8", "127.0.0.1"]);
        let q = &config.quotas;
        assert_eq!(
            (
                q.initialize_per_address,
                q.requests_per_principal,
                q.sessions_per_principal,
                q.streams_per_principal
            ),
            (7, 100, 5, 0)
        );
        assert_eq!(
            (
                q.tasks_per_principal,
                q.tasks_per_address,
                q.listen_streams_per_address
            ),
            (9, 12, 11)
        );
        assert_eq!((q.requests_per_address, q.streams_per_address), (640, 13));
        let bad = Cli::parse_from(["mcp-node", "--trusted-proxies", "proxy.example"]);
        assert!(bad.config(env(&[])).is_err(), "a host name is no address");
    }
}
