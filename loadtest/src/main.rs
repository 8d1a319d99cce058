//! `mcp-loadtest`: drives many concurrent MCP sessions (or 2026-07-28
//! clients) against one Streamable HTTP server, checks every answer, and
//! reports latency per operation.
//!
//! # Layout
//! - [`scenario`]: the TOML scenario, a weighted mix of operations.
//! - [`template`], [`data`]: placeholders in a scenario's values and the
//!   data files they draw from.
//! - [`expect`]: a scenario's checks on answers.
//! - [`threshold`]: pass/fail rules on the run's figures.
//! - [`session`]: one virtual session and the operations it runs.
//! - [`open`]: the open model, operations arriving at a rate.
//! - [`stateless`]: the 2026-07-28 era's requests, results and streams.
//! - [`merge`]: reports of several generators made one.
//! - [`metrics`]: the generator's figures as Prometheus text.
//! - [`check`]: response and progress rules, free of I/O.
//! - [`failures`]: when errors happened, whether they said when to retry,
//!   which requests were lost.
//! - [`initialize`]: opening a session, its answer checked like any other.
//! - [`init`]: a starting scenario from what a live server offers.
//! - [`stats`]: counters, histograms and error counts, whole run and current interval.
//! - [`series`]: the sampler task and the time series (with the server's RSS).
//! - [`report`]: the live progress line, the summary and the JSON report.
//! - [`html`], [`chart`]: the HTML report and its SVG charts.
//! - [`target`]: loopback-only target rule.
//! - [`pools`]: the connection pools, one per `--source-address`.

mod chart;
mod check;
mod data;
mod expect;
mod failures;
mod hold;
mod html;
mod init;
mod initialize;
mod merge;
mod metrics;
mod open;
mod pools;
mod report;
mod rss;
mod scenario;
mod series;
mod session;
mod stateless;
mod stats;
mod target;
mod template;
mod threshold;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use anyhow::{Context, ensure};
use clap::{Parser, Subcommand};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::pools::Pools;
use crate::scenario::Scenario;
use crate::session::Plan;
use crate::stats::Stats;

/// `--duration` when not given.
const DEFAULT_DURATION_SECS: u64 = 30;
/// How long past `--duration` anything may still run before it is aborted.
const HARD_DEADLINE_GRACE: Duration = Duration::from_secs(30);
/// How long an idle pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// Bound on connecting to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Parser)]
#[command(
    name = "mcp-loadtest",
    version,
    about = "Load generator for Streamable HTTP MCP servers",
    long_about = "Load generator for Streamable HTTP MCP servers.\n\n\
        Opens many virtual MCP sessions, each running a weighted mix of operations \
        from a scenario file, checks every answer (response ids, progress order, \
        resumption without gaps or duplicates) and reports latency per operation.\n\n\
        Targets are restricted to 127.0.0.1, ::1 and localhost; any other host must be \
        named with --allow-target."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a load test and prints a summary; exits 1, saying why on stderr, if any
    /// protocol rule was broken, a threshold was broken, or more requests failed than
    /// --max-errors allows.
    Run(RunArgs),
    /// Opens idle sessions (optionally each with its standalone GET stream), prints the
    /// server's extra resident memory per session, holds them, then DELETEs them.
    ///
    /// Prints one line: `hold sessions=N streams=M open_secs=T rss_before_bytes=A
    /// rss_after_bytes=B per_session_bytes=C generator_cpu_secs=S generator_rss_bytes=G`
    /// (the server's RSS fields are `na` without --server-pid; the generator's are its
    /// own CPU time so far and resident memory with every session open). Exits 1 if
    /// any session could not be opened.
    Hold(HoldArgs),
    /// Combines the JSON reports (--report) of runs made at the same time by several
    /// generators into one: counts and errors added, latency histograms merged (not
    /// percentiles averaged), every report's thresholds held again against the whole.
    /// Prints the summary; exits 1, saying why, if the whole broke a protocol rule, a
    /// threshold, or had more errors than --max-errors allows.
    Merge(MergeArgs),
    /// Writes a starting scenario for a live server: lists its tools, resources,
    /// resource templates and prompts, and writes one operation for each, arguments
    /// filled in from the tools' input schemas. Tools not marked read-only get weight
    /// 0: review their arguments before giving them one.
    Init(InitArgs),
}

#[derive(Debug, clap::Args)]
struct InitArgs {
    #[command(flatten)]
    target: TargetArgs,

    /// The scenario file to write (refused if it exists, unless --force).
    #[arg(long, value_name = "FILE.toml")]
    output: PathBuf,

    /// Overwrite --output if it exists.
    #[arg(long)]
    force: bool,

    /// Protocol version offered in `initialize`.
    #[arg(long, default_value = scenario::DEFAULT_PROTOCOL_VERSION)]
    protocol_version: String,
}

#[derive(Debug, clap::Args)]
struct MergeArgs {
    /// The reports, written by `mcp-loadtest run --report`.
    #[arg(required = true, value_name = "REPORT.json")]
    reports: Vec<PathBuf>,

    /// Where to write the merged JSON report.
    #[arg(long, value_name = "FILE.json")]
    report: PathBuf,

    /// Also write the merged report as an HTML page.
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,

    /// More thresholds to hold against the whole (same rules as `run --threshold`).
    #[arg(long = "threshold", value_name = "RULE")]
    thresholds: Vec<String>,

    /// Errors the whole may have (default: 0, unless a threshold on all operations'
    /// errors decides).
    #[arg(long, value_name = "N")]
    max_errors: Option<u64>,
}

/// The server under test and how to reach it (every command but `merge`).
#[derive(Debug, clap::Args)]
struct TargetArgs {
    /// The server's MCP endpoint, e.g. http://127.0.0.1:18400/mcp. Only 127.0.0.1, ::1 and
    /// localhost are accepted unless the host is named with --allow-target.
    #[arg(long)]
    url: String,

    #[command(flatten)]
    http: HttpArgs,

    /// Also allow this non-loopback host as a target (repeatable). Only name servers you
    /// run yourself: this tool generates heavy load.
    #[arg(long = "allow-target", value_name = "HOST")]
    allow_target: Vec<String>,
}

impl TargetArgs {
    /// Refuses a target that is not allowed here.
    ///
    /// # Errors
    /// See [`target::check`].
    fn check(&self) -> anyhow::Result<()> {
        target::check(&self.url, &self.allow_target)
    }
}

/// How requests reach the server: which CA to trust for `https://`, the
/// credentials and extra headers sent with every request.
#[derive(Debug, clap::Args)]
struct HttpArgs {
    /// PEM file of the CA certificates trusted for an https:// --url, instead of the
    /// system's roots.
    #[arg(long, value_name = "FILE.pem")]
    ca_file: Option<PathBuf>,

    /// Bearer token sent as `Authorization: Bearer <token>` with every request. Prefer the
    /// variable or --bearer-token-file: a command line is visible to the machine's other
    /// users. Never printed (the report's command line shows `***`).
    #[arg(
        long,
        env = "MCP_LOADTEST_BEARER_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    bearer_token: Option<String>,

    /// File holding the bearer token (one trailing newline ignored).
    #[arg(long, value_name = "FILE")]
    bearer_token_file: Option<PathBuf>,

    /// Extra header sent with every request, `Name: value` (repeatable). An
    /// Authorization header replaces the bearer token's.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    headers: Vec<String>,

    /// Local address to connect from (repeatable). Sessions take the addresses in
    /// turn, each address with its own connection pool. One source address reaches
    /// one server port about 28,000 times (the local port range), so more open
    /// streams than that need several: on Linux all of 127.0.0.0/8 is local
    /// (`--source-address 127.0.0.2 --source-address 127.0.0.3`). Default: the
    /// system's choice.
    #[arg(long = "source-address", value_name = "IP")]
    source_addresses: Vec<IpAddr>,
}

impl HttpArgs {
    /// The client options these flags describe.
    ///
    /// # Errors
    /// Both a token and a token file, an unreadable or empty token file, or
    /// a header that is not `Name: value`.
    fn options(&self) -> anyhow::Result<mcp_cluster_client::HttpOptions> {
        let bearer_token = match (&self.bearer_token, &self.bearer_token_file) {
            (Some(_), Some(_)) => anyhow::bail!(
                "give one of --bearer-token (or MCP_LOADTEST_BEARER_TOKEN) and --bearer-token-file"
            ),
            (Some(token), None) => Some(token.clone()),
            (None, Some(path)) => {
                let token = std::fs::read_to_string(path)
                    .with_context(|| format!("--bearer-token-file {}", path.display()))?;
                let token = token.trim_end_matches(['\r', '\n']);
                ensure!(
                    !token.is_empty(),
                    "--bearer-token-file {} is empty",
                    path.display()
                );
                Some(token.to_owned())
            }
            (None, None) => None,
        };
        let headers = self
            .headers
            .iter()
            .map(|line| mcp_cluster_client::http::parse_header(line))
            .collect::<Result<_, _>>()?;
        Ok(mcp_cluster_client::HttpOptions {
            ca_file: self.ca_file.clone(),
            bearer_token,
            headers,
        })
    }
}

#[derive(Debug, clap::Args)]
struct HoldArgs {
    #[command(flatten)]
    target: TargetArgs,

    /// Sessions to open and hold.
    #[arg(long, default_value_t = 1000)]
    sessions: usize,

    /// Also open each session's standalone GET (SSE) stream and keep reading it.
    #[arg(long)]
    get_stream: bool,

    /// Seconds to hold the sessions open after the measurement; then every session must
    /// answer a `ping`, and gets its DELETE.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    hold: u64,

    /// Seconds to wait after the last session opened before reading the server's memory:
    /// long enough for what a server does with idle sessions later (mcp-node passivates a
    /// session idle for 30 s by default) to be counted.
    #[arg(long, value_name = "SECS", default_value_t = 2)]
    settle: u64,

    /// The server's process id, to read its resident memory (VmRSS in /proc/PID/status)
    /// before opening and once every session is open and settled (--settle).
    #[arg(long, value_name = "PID")]
    server_pid: Option<u32>,

    /// Sessions being opened (and later deleted) at once.
    #[arg(long, value_name = "K", default_value_t = 64)]
    open_concurrency: usize,

    /// Once the memory is read, one session calls this tool (one that announces a change
    /// to every listening client, such as mcp-node's `test_trigger_tool_change`), and every
    /// stream must hear the announcement (--announced): prints how long the server took to
    /// reach them all and the CPU it spent (with --server-pid). Needs --get-stream.
    #[arg(long, value_name = "TOOL", requires = "get_stream")]
    announce: Option<String>,

    /// The notification --announce makes every stream hear.
    #[arg(
        long,
        value_name = "METHOD",
        default_value = "notifications/tools/list_changed"
    )]
    announced: String,

    /// Protocol version offered in `initialize`.
    #[arg(long, default_value = scenario::DEFAULT_PROTOCOL_VERSION)]
    protocol_version: String,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    target: TargetArgs,

    /// Scenario TOML file: the weighted operation mix (see loadtest/scenarios/).
    /// Without it: tools/list and echo calls only.
    #[arg(long, value_name = "FILE.toml")]
    scenario: Option<PathBuf>,

    /// Virtual sessions (each an MCP session with its own Mcp-Session-Id). With
    /// --rate or --stage: the pool of sessions arrivals run on (at most one operation
    /// each at a time), opened before the clock starts.
    #[arg(long, default_value_t = 100)]
    sessions: usize,

    /// Seconds during which operations start; operations under way then finish, and
    /// anything still running 30 s later is aborted. Default 30; with --stage, the
    /// stages' sum.
    #[arg(long, value_name = "SECS", conflicts_with = "stages")]
    duration: Option<u64>,

    /// Open model: operations arrive at this rate (per second) for --duration,
    /// whatever the server's speed, each on an idle session of the pool; an arrival
    /// that finds every session busy is dropped and counted. Latency counts from each
    /// arrival's intended time. Without --rate or --stage: closed loop (each session
    /// runs its next operation when the last one ends).
    #[arg(long, value_name = "PER_SEC", conflicts_with = "stages")]
    rate: Option<f64>,

    /// Open model with ramping rate (repeatable): `DURATION:RATE`, e.g. `30s:100
    /// 1m:500 30s:0`: the rate moves linearly to RATE per second over DURATION (units
    /// ms, s, m, h), from --start-rate for the first stage.
    #[arg(long = "stage", value_name = "DURATION:RATE")]
    stages: Vec<String>,

    /// The rate at the start of the first --stage, per second.
    #[arg(
        long,
        value_name = "PER_SEC",
        default_value_t = 0.0,
        requires = "stages"
    )]
    start_rate: f64,

    /// Seconds over which session starts are spread evenly (0: all at once); must be
    /// below --duration.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    ramp_up: u64,

    /// Operations each session keeps in flight at once (DELETE waits for the others).
    #[arg(long, value_name = "K", default_value_t = 1)]
    concurrency_per_session: usize,

    /// Also write the report as JSON to this file, with the time series.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,

    /// Also write a self-contained HTML page to this file: the summary tables and
    /// charts over time (throughput, latency, errors, sessions, server RSS).
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,

    /// Length of one time-series interval, milliseconds (at least 100). Raised for runs
    /// so long that they would need more than 20000 intervals.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    interval_ms: u64,

    /// Errors the run may have and still pass: failed operations and other failed
    /// requests (refusals such as 401 or 429, other 4xx and 5xx answers, JSON-RPC
    /// errors, failed checks, transport errors). With more, the run exits 1 and says
    /// how many of each kind. Default 0 (a run whose requests are refused is no
    /// measurement of the server), unless a threshold on all operations' errors is
    /// given (`errors<0.1%`): that one then decides.
    #[arg(long, value_name = "N")]
    max_errors: Option<u64>,

    /// Pass/fail rule on the run (repeatable), added to the scenario's:
    /// `[OPERATION ]METRIC<VALUE` with METRIC p50, p90, p95, p99, p999, max, mean
    /// (units us, ms, s), errors (a share `0.1%` or a count), rate (`100/s`) or dropped
    /// (the open model's dropped arrivals, a share or a count); the comparison `<`,
    /// `<=`, `>` or `>=`. Examples: 'p99<200ms', 'errors<0.1%',
    /// 'call_tool:search p95<1s', 'rate>500/s'. A broken one fails the run (exit 1)
    /// and the summary and the report say which.
    #[arg(long = "threshold", value_name = "RULE")]
    thresholds: Vec<String>,

    /// Serve the generator's figures so far as Prometheus text at
    /// http://ADDR/metrics while the run goes on (operations by outcome, latency
    /// quantiles, errors by key, sessions, arrivals), e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,

    /// PID of the server process: its resident memory (VmRSS from /proc, Linux) is
    /// sampled every interval. If the process goes away, sampling stops and one
    /// `server_rss_lost` error is counted.
    #[arg(long, value_name = "PID")]
    server_pid: Option<u32>,
}

fn main() -> ExitCode {
    // Bad arguments exit 64 (EX_USAGE) as the other bad-argument errors
    // below do, not clap's 2; --help and --version exit 0.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(64)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    raise_fd_limit();
    let outcome = match cli.command {
        Command::Run(args) => run(args),
        Command::Hold(args) => hold(args),
        Command::Merge(args) => merge_reports(&args),
        Command::Init(args) => init_scenario(&args),
    };
    match outcome {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(err) => {
            eprintln!("mcp-loadtest: {err:#}");
            ExitCode::from(64)
        }
    }
}

/// Thousands of sessions need thousands of sockets: lift the soft limit on
/// open files to the hard one (a failure only means fewer sessions fit).
fn raise_fd_limit() {
    if let Err(err) = rlimit::increase_nofile_limit(u64::MAX) {
        eprintln!("mcp-loadtest: could not raise the open-file limit: {err}");
    }
}

/// `hold`: prints the measurement line; returns 1 if sessions could not be
/// opened (bad arguments are errors: exit 64).
fn hold(args: HoldArgs) -> anyhow::Result<u64> {
    args.target.check()?;
    ensure!(args.sessions >= 1, "--sessions must be at least 1");
    ensure!(
        args.open_concurrency >= 1,
        "--open-concurrency must be at least 1"
    );
    if let Some(pid) = args.server_pid {
        rss::rss_bytes(pid).context("--server-pid")?;
    }
    let pools = http_pools(&args.target.url, &args.target.http)?;
    let plan = hold::HoldPlan {
        url: args.target.url,
        protocol_version: args.protocol_version,
        sessions: args.sessions,
        get_stream: args.get_stream,
        hold: Duration::from_secs(args.hold),
        settle: Duration::from_secs(args.settle),
        server_pid: args.server_pid,
        open_concurrency: args.open_concurrency,
        announce: args.announce,
        announced: args.announced,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    match runtime.block_on(hold::run(plan, pools)) {
        Ok(result) => {
            println!("{}", result.line());
            if let Some(announced) = &result.announced {
                println!("{}", announced.line());
            }
            Ok(0)
        }
        Err(err) => {
            eprintln!("mcp-loadtest: {err:#}");
            Ok(1)
        }
    }
}

/// `init`: writes the starting scenario; a server that cannot be listed
/// is an error (exit 64, said on stderr).
fn init_scenario(args: &InitArgs) -> anyhow::Result<u64> {
    args.target.check()?;
    ensure!(
        args.force || !args.output.exists(),
        "{} exists (--force to overwrite it)",
        args.output.display()
    );
    let http = args.target.http.options()?.client()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let listing = runtime.block_on(init::discover(
        &http,
        &args.target.url,
        &args.protocol_version,
    ))?;
    let text = init::scenario_toml(&listing, &args.target.url);
    // What was written must run: checked before it is written.
    let dir = args.output.parent().unwrap_or(std::path::Path::new("."));
    Scenario::parse(&text, dir).context("the scenario written for this server does not load")?;
    std::fs::write(&args.output, &text)
        .with_context(|| format!("writing {}", args.output.display()))?;
    println!(
        "{} written: {} tools, {} resources, {} resource templates, {} prompts",
        args.output.display(),
        listing.tools.len(),
        listing.resources.len(),
        listing.resource_templates.len(),
        listing.prompts.len()
    );
    Ok(0)
}

/// `merge`: writes the merged report; returns 1 when the whole failed.
fn merge_reports(args: &MergeArgs) -> anyhow::Result<u64> {
    let report = merge::merge(&args_echo(), &args.reports, &args.thresholds)?;
    report.print();
    write_report(&report, &args.report)?;
    if let Some(path) = &args.html {
        html::write(&report, path)?;
        println!("HTML report written to {}", path.display());
    }
    let overall_errors_rule = report
        .thresholds
        .iter()
        .any(|v| threshold::Threshold::parse(&v.threshold).is_ok_and(|t| t.is_overall_errors()));
    Ok(failed(&report, args.max_errors, overall_errors_rule))
}

/// Writes the JSON report.
fn write_report(report: &report::Report, path: &std::path::Path) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    println!("report written to {}", path.display());
    Ok(())
}

/// 1 when the run failed (said on stderr, a line each), else 0. Without
/// `--max-errors`, an overall error threshold decides on errors, else 0
/// errors are allowed.
fn failed(report: &report::Report, max_errors: Option<u64>, overall_errors_rule: bool) -> u64 {
    let max_errors = match max_errors {
        Some(max) => Some(max),
        None if overall_errors_rule => None,
        None => Some(0),
    };
    let failures = report.failures(max_errors);
    for failure in &failures {
        eprintln!("mcp-loadtest: run failed: {failure}");
    }
    u64::from(!failures.is_empty())
}

/// The connection pools the virtual sessions share (one per source
/// address), with the CA, token and headers of `args`.
fn http_pools(url: &str, args: &HttpArgs) -> anyhow::Result<Pools> {
    let options = args.options()?;
    Pools::new(url, &args.source_addresses, || {
        Ok(options
            .builder()?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            // Below the 5 s keep-alive of common servers (actix-web, Node.js):
            // a pooled connection the server is closing at the moment of reuse
            // fails the request, which would be counted against the server.
            .pool_idle_timeout(POOL_IDLE_TIMEOUT))
    })
}

/// Runs the test; returns 1 when it failed (a protocol violation, or more
/// errors than `--max-errors`), said on stderr, else 0.
fn run(args: RunArgs) -> anyhow::Result<u64> {
    args.target.check()?;
    ensure!(args.sessions >= 1, "--sessions must be at least 1");
    let duration = Duration::from_secs(args.duration.unwrap_or(DEFAULT_DURATION_SECS));
    let schedule = match (args.rate, args.stages.is_empty()) {
        (Some(rate), _) => Some(open::Schedule::constant(rate, duration)?),
        (None, false) => Some(open::Schedule::ramping(args.start_rate, &args.stages)?),
        (None, true) => None,
    };
    let duration = schedule.as_ref().map_or(duration, open::Schedule::duration);
    ensure!(
        duration >= Duration::from_secs(1),
        "--duration must be at least 1"
    );
    ensure!(
        Duration::from_secs(args.ramp_up) < duration,
        "--ramp-up must be below --duration"
    );
    ensure!(
        args.concurrency_per_session >= 1,
        "--concurrency-per-session must be at least 1"
    );
    if schedule.is_some() {
        ensure!(
            args.ramp_up == 0 && args.concurrency_per_session == 1,
            "--ramp-up and --concurrency-per-session are for the closed loop; with --rate or --stage the arrivals set the pace"
        );
    }
    let mut scenario = Scenario::load(args.scenario.as_deref())?;
    for text in &args.thresholds {
        let threshold = threshold::Threshold::parse(text)?;
        scenario.check_names(&threshold)?;
        scenario.thresholds.push(threshold);
    }
    if schedule.is_none()
        && let Some(rule) = scenario.thresholds.iter().find(|t| t.is_dropped())
    {
        anyhow::bail!(
            "threshold {:?} is on dropped arrivals: give --rate or --stage",
            rule.text
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(drive(args, scenario, duration, schedule))
}

async fn drive(
    args: RunArgs,
    scenario: Scenario,
    duration: Duration,
    schedule: Option<open::Schedule>,
) -> anyhow::Result<u64> {
    let pools = http_pools(&args.target.url, &args.target.http)?;
    let stats = Arc::new(Stats::new(&scenario.names)?);
    let _metrics = match args.metrics_listen {
        Some(addr) => {
            let endpoint = metrics::Endpoint::start(addr, Arc::clone(&stats)).await?;
            eprintln!("mcp-loadtest: figures at http://{}/metrics", endpoint.addr);
            Some(endpoint)
        }
        None => None,
    };
    // The open model's sessions are opened before its clock starts.
    let pool = match &schedule {
        Some(_) => Some(
            open::SessionPool::open(&args.target.url, &scenario, &pools, &stats, args.sessions)
                .await,
        ),
        None => None,
    };
    let start = Instant::now();
    let started_unix_ms = failures::now_unix_ms();
    let plan = Arc::new(Plan {
        url: args.target.url.clone(),
        scenario,
        stats: Arc::clone(&stats),
        pools,
        end: start + duration,
        hard_deadline: start + duration + HARD_DEADLINE_GRACE,
        concurrency: args.concurrency_per_session,
        seq: AtomicU64::new(0),
    });
    let interval = series::interval(
        args.interval_ms,
        duration + HARD_DEADLINE_GRACE,
        series::max_points(plan.scenario.names.len() + 1),
    )?;
    let sampler = series::Sampler::start(Arc::clone(&stats), start, interval, args.server_pid)?;
    let live = report::Live::start(Arc::clone(&stats), args.sessions, duration);

    let (arrivals, unfinished) = match (schedule, pool) {
        (Some(schedule), Some(pool)) => {
            let (arrivals, unfinished) = open::run(Arc::clone(&plan), &schedule, pool, start).await;
            (Some(arrivals), unfinished)
        }
        _ => (None, closed_loop(&plan, &args, start).await),
    };
    let elapsed = start.elapsed();
    let ended_unix_ms = failures::now_unix_ms();
    let series = sampler.finish().await?;
    live.finish();

    let figures = stats.figures();
    let verdicts = threshold::verdicts(
        &plan.scenario.thresholds,
        stats.names(),
        &figures,
        elapsed.as_secs_f64(),
        arrivals.as_ref().map(|a| (a.scheduled, a.dropped)),
    )?;
    let report = report::Report::new(
        &args_echo(),
        &plan,
        &args,
        &figures,
        duration,
        elapsed,
        unfinished,
    )?
    .with_wall_clock(started_unix_ms, ended_unix_ms)
    .with_series(series)
    .with_thresholds(verdicts)
    .with_arrivals(arrivals);
    report.print();
    if let Some(path) = &args.report {
        write_report(&report, path)?;
    }
    if let Some(path) = &args.html {
        html::write(&report, path)?;
        println!("HTML report written to {}", path.display());
    }
    let overall_errors_rule = plan
        .scenario
        .thresholds
        .iter()
        .any(|t| t.is_overall_errors());
    Ok(failed(&report, args.max_errors, overall_errors_rule))
}

/// The closed loop: `--sessions` sessions, each running operations back to
/// back (with the scenario's think time); returns how many were aborted at
/// the hard deadline.
async fn closed_loop(plan: &Arc<Plan>, args: &RunArgs, start: Instant) -> usize {
    let ramp = Duration::from_secs(args.ramp_up);
    let mut sessions = JoinSet::new();
    for i in 0..args.sessions {
        // Session i starts at i/n of the ramp-up.
        let offset = ramp.mul_f64(i as f64 / args.sessions as f64);
        sessions.spawn(session::run(Arc::clone(plan), i, start + offset));
    }
    let all_done = async { while sessions.join_next().await.is_some() {} };
    if tokio::time::timeout_at(plan.hard_deadline, all_done)
        .await
        .is_ok()
    {
        return 0;
    }
    let unfinished = sessions.len();
    sessions.abort_all();
    while sessions.join_next().await.is_some() {}
    unfinished
}

/// The command line, for the report, without secrets.
fn args_echo() -> String {
    redacted(std::env::args()).join(" ")
}

/// `args` with the bearer token and the values of credential headers
/// replaced by `***`.
fn redacted(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bearer-token" => {
                out.push(arg);
                if args.next().is_some() {
                    out.push("***".to_owned());
                }
            }
            "--header" => {
                out.push(arg);
                if let Some(header) = args.next() {
                    out.push(mcp_cluster_client::http::redact_header(&header));
                }
            }
            _ if arg.starts_with("--bearer-token=") => out.push("--bearer-token=***".to_owned()),
            _ => match arg.strip_prefix("--header=") {
                Some(header) => out.push(format!(
                    "--header={}",
                    mcp_cluster_client::http::redact_header(header)
                )),
                None => out.push(arg),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|&a| a.to_owned()).collect()
    }

    #[test]
    fn the_echoed_command_line_hides_credentials() {
        let echoed = redacted(strings(&[
            "mcp-loadtest",
            "run",
            "--bearer-token",
            "s3cret",
            "--bearer-token=s3cret",
            "--header",
            "Authorization: Bearer s3cret",
            "--header=cookie: id=s3cret",
            "--header",
            "X-Tenant: blue",
            "--bearer-token-file",
            "/run/token",
        ]))
        .join(" ");
        assert!(!echoed.contains("s3cret"), "{echoed}");
        assert!(echoed.contains("X-Tenant: blue"), "{echoed}");
        assert!(
            echoed.contains("--bearer-token-file /run/token"),
            "{echoed}"
        );
    }

    #[test]
    fn http_flags_become_client_options() {
        let cli = Cli::parse_from([
            "mcp-loadtest",
            "run",
            "--url",
            "https://127.0.0.1:8443/mcp",
            "--ca-file",
            "/etc/ca.pem",
            "--bearer-token",
            "abc",
            "--header",
            "X-Tenant: blue",
            "--header",
            "X-Trace: 1",
        ]);
        let Command::Run(args) = cli.command else {
            panic!("not run");
        };
        let options = args.target.http.options().unwrap();
        assert_eq!(options.ca_file, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(options.bearer_token.as_deref(), Some("abc"));
        assert_eq!(options.headers.len(), 2);
        let bad = HttpArgs {
            ca_file: None,
            bearer_token: Some("abc".into()),
            bearer_token_file: Some("/run/token".into()),
            headers: Vec::new(),
            source_addresses: Vec::new(),
        };
        assert!(bad.options().is_err());
        let bad_header = HttpArgs {
            bearer_token: None,
            bearer_token_file: None,
            headers: vec!["no colon".into()],
            ..bad
        };
        assert!(bad_header.options().is_err());
    }
}
