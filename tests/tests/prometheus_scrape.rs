//! A real Prometheus scrapes the three nodes of a cluster while
//! `mcp-loadtest` runs the mixed scenario through nginx (round robin, so
//! every node serves a share), and what Prometheus stores afterwards is
//! exactly what the load generator sent: per MCP method, the sum over the
//! nodes of `mcp_server_operation_duration_seconds_count` equals the
//! operations the generator's JSON report counted for that method.
//!
//! How the report maps to methods (loadtest/src/session.rs): every
//! session opens with one `initialize` (report `initialize`, retries
//! included); `delete_session` sends DELETE, then a fresh `initialize`;
//! `tools_list` is one `tools/list`; `echo_call`, `long_call`,
//! `cancel_call`, `drop_and_resume` and `poll_resume` are one `tools/call`
//! each (resumptions are GETs, the cancellation a notification: neither is
//! an operation); `get_stream` is a GET only. A cancelled call is recorded
//! by its node with `error_type="cancelled"` (or as a success when its
//! result won the race with the cancellation).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_cluster_testkit::{Cluster, PROMETHEUS_JOB, Prometheus, loadtest_binary};
use serde_json::Value;

/// Bound on every wait for Prometheus: many scrape intervals (1 s), for a
/// loaded CI machine.
const SCRAPE_WAIT: Duration = Duration::from_secs(90);
/// Pause between two looks at Prometheus.
const POLL: Duration = Duration::from_millis(250);
/// Consecutive equal answers, all from scrapes after the run ended, after
/// which a count that still differs is a failure rather than a scrape not
/// yet taken.
const STABLE_ANSWERS: usize = 12;

const NODES: usize = 3;

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../loadtest/scenarios")
        .join(name)
        .display()
        .to_string()
}

/// `sum(...)` of a query, 0 when no series matches yet.
fn sum(prometheus: &Prometheus, promql: &str) -> f64 {
    prometheus
        .query_scalar(promql)
        .unwrap_or_else(|err| panic!("{err:#}"))
        .unwrap_or(0.0)
}

/// The operations Prometheus holds for `method`, all nodes together.
fn operations(method: &str) -> String {
    format!(
        "sum(mcp_server_operation_duration_seconds_count\
         {{job=\"{PROMETHEUS_JOB}\",mcp_method_name=\"{method}\"}})"
    )
}

/// `ok + failed` of the report's operation `kind` (0 when it never ran).
fn sent(report: &Value, kind: &str) -> u64 {
    let op = &report["operations"][kind];
    op["ok"].as_u64().unwrap_or(0) + op["failed"].as_u64().unwrap_or(0)
}

/// Waits until every target is up, scraped after `after` (Unix seconds).
fn wait_for_scrape_after(prometheus: &Prometheus, after: f64) {
    let query = format!("timestamp(up{{job=\"{PROMETHEUS_JOB}\"}})");
    let mut waited = Duration::ZERO;
    loop {
        let scrapes = prometheus.query(&query).unwrap();
        if scrapes.len() == NODES && scrapes.iter().all(|(_, at)| *at > after) {
            return;
        }
        assert!(
            waited < SCRAPE_WAIT,
            "no scrape of every node after {after}: {scrapes:?}\n{}",
            prometheus.log()
        );
        std::thread::sleep(POLL);
        waited += POLL;
    }
}

#[test]
fn prometheus_counts_exactly_the_requests_the_load_generator_sent() {
    let cluster = Cluster::start(NODES, &[]).unwrap();
    let targets: Vec<SocketAddr> = (0..NODES).map(|i| cluster.node_addr(i)).collect();
    let prometheus = Prometheus::start(&targets).unwrap();
    wait_for_scrape_after(&prometheus, now_secs());
    let methods = ["initialize", "tools/list", "tools/call"];
    // Fresh nodes: nothing counted yet (read after a scrape, so a node
    // that had counted something would show it).
    for method in methods {
        assert_eq!(sum(&prometheus, &operations(method)), 0.0, "{method}");
    }

    let dir = std::env::temp_dir().join(format!("mcp-e2e-prometheus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let output = Command::new(loadtest_binary())
        .args(["run", "--url", &cluster.lb_url(), "--scenario"])
        .arg(scenario("mixed.toml"))
        .args(["--sessions", "20", "--duration", "4", "--report"])
        .arg(&json)
        .output()
        .expect("running mcp-loadtest");
    let ended = now_secs();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // Every operation sent was answered and checked: none failed in a way
    // that leaves open whether a node saw it.
    assert_eq!(report["total_failed"], 0, "{stdout}");
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    assert_eq!(report["unfinished_sessions"], 0, "{stdout}");

    let expected = vec![
        (
            "initialize",
            sent(&report, "initialize") + sent(&report, "delete_session"),
        ),
        ("tools/list", sent(&report, "tools_list")),
        (
            "tools/call",
            [
                "echo_call",
                "long_call",
                "cancel_call",
                "drop_and_resume",
                "poll_resume",
            ]
            .iter()
            .map(|kind| sent(&report, kind))
            .sum(),
        ),
    ];
    for (method, count) in &expected {
        assert!(*count > 0, "the scenario sent no {method}: {stdout}");
    }

    // A node counts a call when its answer is written (a cancelled one when
    // its handler stops), possibly just after the client saw the end: wait
    // for scrapes after the run until the counts match, or until they have
    // stayed the same for many scrapes.
    // Once they match, one more scrape must agree (a late extra count
    // would show there).
    let counts = || -> Vec<(&str, u64)> {
        expected
            .iter()
            .map(|(method, _)| (*method, sum(&prometheus, &operations(method)) as u64))
            .collect()
    };
    let mut waited = Duration::ZERO;
    let mut last = None;
    let mut same = 0;
    let counted = loop {
        wait_for_scrape_after(&prometheus, ended);
        let counted = counts();
        if counted == expected {
            wait_for_scrape_after(&prometheus, now_secs());
            break counts();
        }
        if last.as_ref() == Some(&counted) {
            same += 1;
        } else {
            same = 0;
        }
        if same >= STABLE_ANSWERS || waited >= SCRAPE_WAIT {
            break counted;
        }
        last = Some(counted);
        std::thread::sleep(POLL);
        waited += POLL;
    };
    eprintln!("counted by Prometheus: {counted:?}");
    let by_node = prometheus
        .query(&format!(
            "sum by (instance, mcp_method_name, error_type) \
             (mcp_server_operation_duration_seconds_count{{job=\"{PROMETHEUS_JOB}\"}})"
        ))
        .unwrap();
    assert_eq!(
        counted, expected,
        "Prometheus (left) against the load generator (right)\nby node: {by_node:?}\n{stdout}"
    );

    // Round robin: every node served calls, and every one was scraped.
    let calls_by_node = prometheus
        .query(&format!(
            "sum by (instance) (mcp_server_operation_duration_seconds_count\
             {{job=\"{PROMETHEUS_JOB}\",mcp_method_name=\"tools/call\"}})"
        ))
        .unwrap();
    assert_eq!(calls_by_node.len(), NODES, "{calls_by_node:?}");
    assert!(
        calls_by_node.iter().all(|(_, n)| *n > 0.0),
        "{calls_by_node:?}"
    );
    let up = prometheus
        .query(&format!("up{{job=\"{PROMETHEUS_JOB}\"}}"))
        .unwrap();
    let mut instances: Vec<String> = up
        .iter()
        .map(|(labels, value)| {
            assert_eq!(*value, 1.0, "{labels}");
            labels["instance"].as_str().unwrap().to_owned()
        })
        .collect();
    instances.sort();
    let mut want: Vec<String> = targets.iter().map(ToString::to_string).collect();
    want.sort();
    assert_eq!(instances, want);

    // Nothing failed on the nodes either: the only error is the
    // cancellation, and only on calls the generator cancelled.
    let errors = prometheus
        .query(&format!(
            "sum by (mcp_method_name, error_type) (mcp_server_operation_duration_seconds_count\
             {{job=\"{PROMETHEUS_JOB}\",error_type!=\"\"}})"
        ))
        .unwrap();
    for (labels, count) in &errors {
        assert_eq!(labels["mcp_method_name"], "tools/call", "{errors:?}");
        assert_eq!(labels["error_type"], "cancelled", "{errors:?}");
        assert!(
            *count as u64 <= sent(&report, "cancel_call"),
            "{errors:?}\n{stdout}"
        );
    }
}
