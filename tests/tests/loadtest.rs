//! The load generator, run as a process against a real `mcp-node` process:
//! every operation kind of the mixed scenario succeeds with no protocol
//! violation, the reports carry the time series and the server's RSS, and
//! `hold` measures the memory of idle sessions with open GET streams.
//! Small numbers: this checks the tool works, it does not measure speed.

use mcp_cluster_testkit::{Cluster, NodeProcess, loadtest, loadtest_scenario, node_binary};
use serde_json::Value;

#[test]
fn mixed_scenario_runs_every_operation_without_violations_and_reports_over_time() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = std::env::temp_dir().join(format!("mcp-loadtest-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, html) = (dir.join("r.json"), dir.join("r.html"));
    let pid = node.pid().to_string();
    let output = loadtest(&[
        "run",
        "--url",
        node.url(),
        "--scenario",
        &loadtest_scenario("mixed.toml"),
        "--sessions",
        "20",
        "--duration",
        "4",
        "--server-pid",
        &pid,
        "--report",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");

    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    assert_eq!(report["total_failed"], 0, "{stdout}");
    for kind in [
        "initialize",
        "tools_list",
        "echo_call",
        "long_call",
        "cancel_call",
        "get_stream",
        "drop_and_resume",
        "poll_resume",
    ] {
        let op = &report["operations"][kind];
        assert!(op["ok"].as_u64().is_some_and(|ok| ok > 0), "{kind}: {op}");
    }
    let series = report["series"]["points"].as_array().unwrap();
    assert!(series.len() >= 3, "{}", report["series"]);
    assert!(
        series.iter().all(|p| p["server_rss_bytes"]
            .as_u64()
            .is_some_and(|rss| rss > 1 << 20)),
        "{}",
        report["series"]
    );

    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.matches("<svg").count() >= 5, "too few charts");
    assert!(page.contains("poll_resume"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same mix through nginx (round robin, no stickiness) in front of three
/// nodes sharing Redis: every request may land on another node, resumption
/// included, and nothing is lost or duplicated. Then both eras at once
/// (`mixed-eras.toml`): a 2026-07-28 client's retry with its answers and
/// request state lands on any node, and so do listen streams.
#[test]
fn mixed_scenario_through_a_load_balancer_in_front_of_a_cluster() {
    let cluster = Cluster::start(3, &[]).unwrap();
    let url = cluster.nginx().url();
    let output = loadtest(&[
        "run",
        "--url",
        &url,
        "--scenario",
        &loadtest_scenario("mixed.toml"),
        "--sessions",
        "20",
        "--duration",
        "4",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains("0 failed") && stdout.contains(" 0 protocol violations"),
        "{stdout}"
    );

    let output = loadtest(&[
        "run",
        "--url",
        &url,
        "--scenario",
        &loadtest_scenario("mixed-eras.toml"),
        "--sessions",
        "16",
        "--duration",
        "3",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for row in ["server_discover ", "elicit ", "listen "] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("no {row}row: {stdout}"));
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(fields[1].parse::<u64>().unwrap() > 0, "{line}");
        assert_eq!(fields[2], "0", "{line}");
    }
}

#[test]
fn hold_reports_memory_per_session_with_open_streams() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let pid = node.pid().to_string();
    let output = loadtest(&[
        "hold",
        "--url",
        node.url(),
        "--sessions",
        "300",
        "--get-stream",
        "--hold",
        "0",
        "--server-pid",
        &pid,
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("hold "))
        .unwrap_or_else(|| panic!("no hold line: {stdout}"));
    let field = |name: &str| -> i64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing: {line}"))
            .parse()
            .unwrap()
    };
    assert_eq!(field("sessions"), 300, "{line}");
    assert_eq!(field("streams"), 300, "{line}");
    // 300 sessions with open streams cost the server real memory.
    assert!(field("per_session_bytes") > 0, "{line}");
    assert!(
        field("rss_after_bytes") > field("rss_before_bytes"),
        "{line}"
    );
    // The generator reports its own cost beside the server's.
    assert!(field("generator_rss_bytes") > 1 << 20, "{line}");
    assert!(line.contains(" generator_cpu_secs="), "{line}");
}

#[test]
fn refuses_targets_off_loopback_without_allow_target() {
    let output = loadtest(&[
        "run",
        "--url",
        "http://192.0.2.1/mcp",
        "--sessions",
        "1",
        "--duration",
        "1",
    ]);
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--allow-target"));
}

#[test]
fn hold_fails_when_the_server_refuses_sessions_and_closes_those_it_opened() {
    let node =
        NodeProcess::spawn(&node_binary(), &["--log", "error", "--max-sessions", "10"]).unwrap();
    let output = loadtest(&[
        "hold",
        "--url",
        node.url(),
        "--sessions",
        "15",
        // Concurrent initializes: the node's limit holds exactly.
        "--open-concurrency",
        "8",
        "--hold",
        "0",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("5 of 15 sessions could not be opened"),
        "{stderr}"
    );
    // The ten it opened were deleted: the node has room for ten again.
    let again = loadtest(&[
        "hold",
        "--url",
        node.url(),
        "--sessions",
        "10",
        "--hold",
        "0",
    ]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// `--source-address` spreads the sessions, their streams included, over
/// several local addresses in turn (the way past one address's ~28,000
/// connections to one port): the node's access log sees each peer address
/// open as many streams as sessions it was given.
#[test]
fn hold_spreads_sessions_over_source_addresses() {
    let node =
        NodeProcess::spawn_logged(&node_binary(), &["--log", "warn,mcp_access=info"], &[]).unwrap();
    let output = loadtest(&[
        "hold",
        "--url",
        node.url(),
        "--sessions",
        "9",
        "--get-stream",
        "--hold",
        "0",
        "--source-address",
        "127.0.0.2",
        "--source-address",
        "127.0.0.3",
        "--source-address",
        "127.0.0.4",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // The DELETEs are logged after the streams: wait for the last one.
    let deletes = |log: &[String]| log.iter().filter(|l| l.contains("method=DELETE")).count();
    for _ in 0..100 {
        if deletes(&node.log()) == 9 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = node.log();
    assert_eq!(deletes(&log), 9, "{log:#?}");
    for peer in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        let from = |method: &str| {
            log.iter()
                .filter(|l| l.contains(method) && l.contains(&format!("peer=\"{peer}\"")))
                .count()
        };
        assert_eq!(from("method=GET"), 3, "{peer}: {log:#?}");
        assert_eq!(from("method=DELETE"), 3, "{peer}: {log:#?}");
    }

    // A source of the other family than the target is a usage error.
    let refused = loadtest(&[
        "hold",
        "--url",
        node.url(),
        "--sessions",
        "1",
        "--source-address",
        "::1",
    ]);
    assert_eq!(refused.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--source-address ::1"));
}
