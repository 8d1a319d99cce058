//! `mcp-loadtest`: drives many concurrent MCP sessions against one
//! Streamable HTTP server, checks every answer, and reports latency per
//! operation kind.
//!
//! # Layout
//! - [`scenario`]: the TOML scenario, a weighted mix of operations.
//! - [`session`]: one virtual session and the operations it runs.
//! - [`check`]: response and progress rules, free of I/O.
//! - [`stats`]: counters, histograms and error counts.
//! - [`report`]: the live progress line, the summary and the JSON report.
//! - [`target`]: loopback-only target rule.

mod check;
mod report;
mod scenario;
mod session;
mod stats;
mod target;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, ensure};
use clap::{Parser, Subcommand};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::scenario::Scenario;
use crate::session::Plan;
use crate::stats::Stats;

/// How long past `--duration` anything may still run before it is aborted.
const HARD_DEADLINE_GRACE: Duration = Duration::from_secs(30);
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
    /// Runs a load test and prints a summary; exits 1 if any protocol rule was broken.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The server's MCP endpoint, e.g. http://127.0.0.1:18400/mcp. Only 127.0.0.1, ::1 and
    /// localhost are accepted unless the host is named with --allow-target.
    #[arg(long)]
    url: String,

    /// Also allow this non-loopback host as a target (repeatable). Only name servers you
    /// run yourself: this tool generates heavy load.
    #[arg(long = "allow-target", value_name = "HOST")]
    allow_target: Vec<String>,

    /// Scenario TOML file: the weighted operation mix (see loadtest/scenarios/).
    /// Without it: tools/list and echo calls only.
    #[arg(long, value_name = "FILE.toml")]
    scenario: Option<PathBuf>,

    /// Virtual sessions (each an MCP session with its own Mcp-Session-Id).
    #[arg(long, default_value_t = 100)]
    sessions: usize,

    /// Seconds during which operations start; operations under way then finish, and
    /// anything still running 30 s later is aborted.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    duration: u64,

    /// Seconds over which session starts are spread evenly (0: all at once); must be
    /// below --duration.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    ramp_up: u64,

    /// Operations each session keeps in flight at once (DELETE waits for the others).
    #[arg(long, value_name = "K", default_value_t = 1)]
    concurrency_per_session: usize,

    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Command::Run(args) = cli.command;
    match run(args) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(err) => {
            eprintln!("mcp-loadtest: {err:#}");
            ExitCode::from(64)
        }
    }
}

/// Runs the test; returns the number of protocol violations.
fn run(args: RunArgs) -> anyhow::Result<u64> {
    target::check(&args.url, &args.allow_target)?;
    ensure!(args.sessions >= 1, "--sessions must be at least 1");
    ensure!(args.duration >= 1, "--duration must be at least 1");
    ensure!(
        args.ramp_up < args.duration,
        "--ramp-up must be below --duration"
    );
    ensure!(
        args.concurrency_per_session >= 1,
        "--concurrency-per-session must be at least 1"
    );
    let scenario = Scenario::load(args.scenario.as_deref())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(drive(args, scenario))
}

async fn drive(args: RunArgs, scenario: Scenario) -> anyhow::Result<u64> {
    let http = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .build()
        .context("building the HTTP client")?;
    let stats = Arc::new(Stats::new()?);
    let start = Instant::now();
    let duration = Duration::from_secs(args.duration);
    let plan = Arc::new(Plan {
        url: args.url.clone(),
        scenario,
        stats: Arc::clone(&stats),
        http,
        end: start + duration,
        hard_deadline: start + duration + HARD_DEADLINE_GRACE,
        concurrency: args.concurrency_per_session,
    });
    let live = report::Live::start(Arc::clone(&stats), args.sessions);

    let ramp = Duration::from_secs(args.ramp_up);
    let mut sessions = JoinSet::new();
    for i in 0..args.sessions {
        // Session i starts at i/n of the ramp-up.
        let offset = ramp.mul_f64(i as f64 / args.sessions as f64);
        sessions.spawn(session::run(Arc::clone(&plan), start + offset));
    }
    let mut unfinished = 0;
    let all_done = async { while sessions.join_next().await.is_some() {} };
    if tokio::time::timeout_at(plan.hard_deadline, all_done)
        .await
        .is_err()
    {
        unfinished = sessions.len();
        sessions.abort_all();
        while sessions.join_next().await.is_some() {}
    }
    let elapsed = start.elapsed();
    live.finish();

    let report = report::Report::new(&args_echo(), &plan, &args, elapsed, unfinished);
    report.print();
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(report.protocol_violations)
}

/// The command line, for the report.
fn args_echo() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}
