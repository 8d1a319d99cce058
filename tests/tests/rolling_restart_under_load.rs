//! A rolling restart of every node behind the documented nginx
//! configuration, under the load generator's mixed scenario (200 sessions:
//! calls with progress, cancellations, standalone streams, resumptions,
//! session churn), is invisible to clients: no failed operation and no
//! protocol violation in the load generator's report.

use std::time::Duration;

use mcp_cluster_testkit::{Cluster, MixedLoad};

#[test]
fn a_rolling_restart_under_load_fails_no_operation() {
    let mut cluster = Cluster::start(3, &["--log", "warn"]).unwrap();
    // Long enough for three drains (each: the drain delay, then the
    // requests admitted before it finish) and the restarts between them.
    let load = MixedLoad::start(&cluster.lb_url(), 200, 40);

    std::thread::sleep(Duration::from_secs(5));
    for i in 0..cluster.len() {
        let status = cluster.terminate_node(i).unwrap().expect("running");
        assert!(status.success(), "node {i} exit status {status}");
        cluster.restart_node(i).unwrap();
        std::thread::sleep(Duration::from_secs(2));
    }
    let (status, report) = load.finish();
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
}
