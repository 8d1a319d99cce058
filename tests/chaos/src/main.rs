//! `mcp-chaos`: injects faults into a real three-node cluster under mixed
//! load, each as often as asked, and reports what the clients lost, saw and
//! were told (see the crate's documentation). Exits 1 when a run failed.
//!
//! ```text
//! cargo build --workspace --bins
//! target/debug/mcp-chaos --fault all --repeat 20 --report chaos.json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use mcp_chaos::{Fault, RunOptions, Summary, run};

/// Faults under load, one at a time, repeated.
#[derive(Debug, Parser)]
#[command(name = "mcp-chaos", version)]
struct Args {
    /// The fault to inject (repeatable), or `all`: node-kill,
    /// rolling-restart, sentinel-failover, shard-failover,
    /// redis-restart-empty, redis-partition, slow-reader.
    #[arg(long = "fault", default_value = "all")]
    faults: Vec<String>,
    /// Runs of each fault, each on a fresh cluster.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Virtual clients of the load generator.
    #[arg(long, default_value_t = RunOptions::default().sessions)]
    sessions: u32,
    /// Seconds of load per run; by default the warm-up, what the fault
    /// takes, and --calm.
    #[arg(long)]
    duration: Option<u32>,
    /// Seconds of load after the fault (when --duration is not given).
    #[arg(long, default_value_t = RunOptions::default().calm.as_secs())]
    calm: u64,
    /// Seconds of load before the fault strikes.
    #[arg(long, default_value_t = RunOptions::default().warmup.as_secs())]
    warmup: u64,
    /// The load scenario, a file of loadtest/scenarios/.
    #[arg(long, default_value_t = RunOptions::default().scenario)]
    scenario: String,
    /// Streams nobody reads, for slow-reader.
    #[arg(long, default_value_t = RunOptions::default().slow_readers)]
    slow_readers: usize,
    /// Writes every run and the summaries as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Extra arguments for every node (after `--`).
    #[arg(last = true)]
    node_args: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let faults = match faults(&args.faults) {
        Ok(faults) => faults,
        Err(err) => {
            eprintln!("mcp-chaos: {err}");
            return ExitCode::from(64);
        }
    };
    let mut options = RunOptions {
        sessions: args.sessions,
        duration_secs: args.duration,
        calm: Duration::from_secs(args.calm),
        warmup: Duration::from_secs(args.warmup),
        scenario: args.scenario,
        slow_readers: args.slow_readers,
        ..RunOptions::default()
    };
    // A `--log` of the caller's replaces the runner's quiet default (a
    // node takes one).
    if args
        .node_args
        .iter()
        .any(|arg| arg == "--log" || arg.starts_with("--log="))
    {
        options.node_args.clear();
    }
    options.node_args.extend(args.node_args);

    let mut summaries = Vec::new();
    for fault in faults {
        let mut summary = Summary {
            fault,
            runs: Vec::new(),
        };
        for i in 1..=args.repeat {
            let verdict = run(fault, &options);
            println!("[{i}/{}] {verdict}", args.repeat);
            summary.runs.push(verdict);
        }
        summaries.push(summary);
    }
    println!();
    for summary in &summaries {
        println!("{summary}");
    }
    if let Some(path) = &args.report {
        let json = serde_json::json!({
            "options": {
                "sessions": options.sessions,
                "duration_secs": options.duration_secs,
                "warmup_secs": options.warmup.as_secs(),
                "scenario": options.scenario,
                "repeat": args.repeat,
            },
            "faults": summaries.iter().map(Summary::to_json).collect::<Vec<_>>(),
        });
        let text = serde_json::to_string_pretty(&json).unwrap_or_default();
        if let Err(err) = std::fs::write(path, text) {
            eprintln!("mcp-chaos: writing {}: {err}", path.display());
            return ExitCode::from(74);
        }
    }
    if summaries.iter().all(Summary::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The faults named, `all` standing for every one, in order, each once.
fn faults(names: &[String]) -> Result<Vec<Fault>, String> {
    let mut faults = Vec::new();
    for name in names {
        let named = if name == "all" {
            Fault::ALL.to_vec()
        } else {
            vec![name.parse::<Fault>()?]
        };
        for fault in named {
            if !faults.contains(&fault) {
                faults.push(fault);
            }
        }
    }
    Ok(faults)
}
