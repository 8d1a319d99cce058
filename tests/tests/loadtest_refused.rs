//! A load test whose requests the server refuses does not pass: against a
//! node with a tiny quota (most `initialize` answers are 429), `mcp-loadtest
//! run` exits 1 and says on stderr how many errors of which kind, unless
//! `--max-errors` allows that many; its report says when they came and that
//! each said when to retry (`Retry-After`). Bad arguments exit 64, as the
//! loadtest README says.

use std::process::{Command, Output};

use mcp_cluster_testkit::{NodeProcess, loadtest_binary, loadtest_output, node_binary};
use serde_json::Value;

fn loadtest(url: &str, extra: &[&str]) -> Output {
    loadtest_output(
        Command::new(loadtest_binary())
            .args(["run", "--url", url, "--sessions", "10", "--duration", "2"])
            .args(extra),
    )
}

#[test]
fn a_run_whose_requests_are_refused_exits_1_saying_why() {
    let node = NodeProcess::spawn(
        &node_binary(),
        &[
            "--log",
            "error",
            "--quota-initialize-per-address",
            "3",
            // Not loopback: the load generator on 127.0.0.1 is the client
            // the quota counts.
            "--trusted-proxies",
            "192.0.2.1",
        ],
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("mcp-loadtest-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let output = loadtest(node.url(), &["--report", json.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("mcp-loadtest: run failed: "))
        .unwrap_or_else(|| panic!("no reason given: {stderr}"));
    assert!(line.contains("more than --max-errors 0 allows"), "{line}");
    assert!(line.contains("429"), "{line}");
    // Every 429 said when to retry (the quota's `Retry-After`), and the
    // report says when the refusals came, within the run.
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let key = "refused:429_too_many_requests";
    let refused = report["errors"][key].as_u64().unwrap();
    assert!(refused > 0, "{}", report["errors"]);
    assert_eq!(report["retry"]["said"][key], refused, "{}", report["retry"]);
    assert!(
        report["retry"]["not_said"].get(key).is_none(),
        "{}",
        report["retry"]
    );
    let window = &report["error_window"];
    assert_eq!(window["by_key"][key]["count"], refused, "{window}");
    let at = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("{window}"));
    let (started, ended) = (at(&report["started_unix_ms"]), at(&report["ended_unix_ms"]));
    let (first, last) = (at(&window["first_unix_ms"]), at(&window["last_unix_ms"]));
    assert!(
        started <= first && first <= last && last <= ended,
        "{window}"
    );
    assert_eq!(report["lost_responses"], 0);
    std::fs::remove_dir_all(&dir).unwrap();

    // Allowed: the same refusals pass (the summary still shows them).
    let allowed = loadtest(node.url(), &["--max-errors", "1000000000"]);
    let stdout = String::from_utf8_lossy(&allowed.stdout);
    assert!(allowed.status.success(), "{stdout}");
    assert!(stdout.contains("429"), "{stdout}");
}

#[test]
fn bad_arguments_exit_64_and_help_0() {
    let output = Command::new(loadtest_binary())
        .args([
            "run",
            "--url",
            "http://127.0.0.1:1/mcp",
            "--sessions",
            "many",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--sessions"));
    let help = Command::new(loadtest_binary())
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--max-errors"));
}
