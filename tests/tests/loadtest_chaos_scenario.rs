//! The load a chaos run keeps up (`loadtest/scenarios/chaos.toml`: both
//! eras, every kind of stream, tasks polled on whichever node the load
//! balancer picks, resource subscriptions whose update is raised on one
//! node and written by another) on a healthy three-node cluster: nothing
//! fails and nothing is lost, so that whatever fails under injected faults
//! is the faults' doing. The report carries what the chaos runner reads:
//! the run's wall-clock bounds, an error window with no error in it, no
//! refusal that said when to retry.

use mcp_cluster_testkit::{Cluster, MixedLoad};

#[test]
fn the_chaos_scenario_runs_without_a_failure_on_a_healthy_cluster() {
    let cluster = Cluster::start(3, &["--log", "warn"]).unwrap();
    let (status, report) =
        MixedLoad::start_scenario(&cluster.lb_url(), "chaos.toml", 50, 15).finish();
    eprintln!(
        "chaos scenario on a healthy cluster: {} operations ok, {} failed, {} protocol violations, {} lost, errors {}",
        report["total_ok"],
        report["total_failed"],
        report["protocol_violations"],
        report["lost_responses"],
        report["errors"]
    );
    assert_eq!(report["total_failed"], 0, "{}", report["errors"]);
    assert_eq!(report["protocol_violations"], 0, "{}", report["errors"]);
    assert_eq!(report["lost_responses"], 0, "{}", report["errors"]);
    // Both eras ran their own kinds, the new ones included.
    for name in [
        "initialize",
        "server_discover",
        "echo_call",
        "task_call:slow_compute",
        "subscribe",
        "listen",
        "drop_and_resume",
        "poll_resume",
        "elicit",
    ] {
        let op = &report["operations"][name];
        assert!(op["ok"].as_u64().is_some_and(|ok| ok > 0), "{name}: {op}");
        assert_eq!(op["failed"], 0, "{name}: {op}");
    }
    // Healthy, the nodes make every task they are asked for.
    assert_eq!(report["tasks_answered_at_once"], 0);
    let window = &report["error_window"];
    assert!(window["first_unix_ms"].is_null(), "{window}");
    assert_eq!(window["by_key"], serde_json::json!({}), "{window}");
    assert_eq!(report["retry"]["said"], serde_json::json!({}));
    let started = report["started_unix_ms"].as_u64().unwrap();
    let ended = report["ended_unix_ms"].as_u64().unwrap();
    assert!(started < ended, "{started} {ended}");
    assert!(status.success(), "mcp-loadtest exit status {status}");
}
