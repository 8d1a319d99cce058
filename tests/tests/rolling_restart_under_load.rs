//! A rolling restart of every node behind the documented nginx
//! configuration, under the load generator's mixed scenario (200 sessions:
//! calls with progress, cancellations, standalone streams, resumptions,
//! session churn), is invisible to clients: no failed operation and no
//! protocol violation in the load generator's report.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mcp_cluster_testkit::{Cluster, loadtest_binary};
use serde_json::Value;

#[test]
fn a_rolling_restart_under_load_fails_no_operation() {
    let mut cluster = Cluster::start(3, &["--log", "warn"]).unwrap();
    let dir = std::env::temp_dir().join(format!("mcp-rolling-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.json");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../loadtest/scenarios/mixed.toml");
    // Long enough for three drains (each: the drain delay, then the
    // requests admitted before it finish) and the restarts between them.
    let mut load = Command::new(loadtest_binary())
        .args(["run", "--url", &cluster.lb_url(), "--scenario"])
        .arg(&scenario)
        .args([
            "--sessions",
            "200",
            "--ramp-up",
            "2",
            "--duration",
            "40",
            "--report",
        ])
        .arg(&report)
        .spawn()
        .expect("running mcp-loadtest");

    std::thread::sleep(Duration::from_secs(5));
    for i in 0..cluster.len() {
        let status = cluster.terminate_node(i).unwrap().expect("running");
        assert!(status.success(), "node {i} exit status {status}");
        cluster.restart_node(i).unwrap();
        std::thread::sleep(Duration::from_secs(2));
    }
    let status = load.wait().unwrap();
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    eprintln!(
        "rolling restart under load: {} operations ok, {} failed, {} protocol violations, errors {}",
        report["total_ok"], report["total_failed"], report["protocol_violations"], report["errors"]
    );
    let refused: Vec<String> = cluster
        .nginx()
        .access_log()
        .lines()
        .filter(|l| !l.contains("\" 200 ") && !l.contains("\" 202 "))
        .map(str::to_owned)
        .collect();
    eprintln!("not 200/202 at the load balancer:\n{}", refused.join("\n"));
    eprintln!("nginx errors:\n{}", cluster.nginx().error_log());
    assert_eq!(report["total_failed"], 0, "{}", report["errors"]);
    assert_eq!(report["protocol_violations"], 0, "{}", report["errors"]);
    assert!(
        report["total_ok"].as_u64().unwrap() > 1000,
        "{}",
        report["total_ok"]
    );
    assert!(status.success(), "mcp-loadtest exit status {status}");
    std::fs::remove_dir_all(&dir).unwrap();
}
