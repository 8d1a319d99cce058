//! Scenarios of your own tools, run by the `mcp-loadtest` process against a
//! real `mcp-node` process: named tools, resources, prompts, lists and
//! completions with arguments drawn from data files; checks on each answer
//! that fail the operation (never count it as a success) when the answer is
//! wrong; thresholds that fail the run and say which.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mcp_cluster_testkit::{NodeProcess, loadtest, loadtest_binary, node_binary};
use serde_json::Value;

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../loadtest/scenarios")
}

/// A scratch directory of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mcp-loadtest-scenarios-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `scenario` against `node` for 2 s with 8 sessions; returns the
/// output and the JSON report.
fn run(node: &NodeProcess, scenario: &Path, extra: &[&str], dir: &Path) -> (Output, Value) {
    run_with(node, scenario, "8", "2", extra, dir)
}

/// [`run`] with `sessions` and `duration`.
fn run_with(
    node: &NodeProcess,
    scenario: &Path,
    sessions: &str,
    duration: &str,
    extra: &[&str],
    dir: &Path,
) -> (Output, Value) {
    let json = dir.join("report.json");
    let _ = std::fs::remove_file(&json);
    let mut args = vec![
        "run",
        "--url",
        node.url(),
        "--scenario",
        scenario.to_str().unwrap(),
        "--sessions",
        sessions,
        "--duration",
        duration,
        "--report",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = loadtest(&args);
    let report = std::fs::read(&json)
        .map(|bytes| serde_json::from_slice(&bytes).unwrap())
        .unwrap_or(Value::Null);
    (output, report)
}

#[test]
fn your_own_tools_run_with_data_templates_and_checks() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("tools");
    let (output, report) = run(&node, &scenarios().join("tools.toml"), &[], &dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    assert_eq!(report["total_failed"], 0, "{stdout}");
    // Every operation of the scenario ran, under its own name, and each
    // success passed its checks: the sums of `add` are the data file's.
    for name in [
        "initialize",
        "call_tool:add",
        "echo_seq",
        "read_resource",
        "get_prompt:test_prompt_with_arguments",
        "list:prompts",
        "complete",
        "add_refuses_text",
    ] {
        let op = &report["operations"][name];
        assert!(op["ok"].as_u64().is_some_and(|ok| ok > 0), "{name}: {op}");
        assert_eq!(op["failed"], 0, "{name}: {op}");
    }
    let verdicts: Vec<(&str, bool)> = report["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["threshold"].as_str().unwrap(), v["passed"] == true))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("call_tool:add p99<500ms", true),
            ("errors<1%", true),
            ("p99<2s", true)
        ]
    );
    assert!(stdout.contains("threshold errors<1%: passed"), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Wrong answers on purpose (checks that cannot hold): every such answer
/// is a failure under its check's key, none a success, the run fails, and
/// the report keeps the first failing answer.
#[test]
fn answers_that_fail_their_checks_are_failures_never_successes() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("wrong");
    let pairs = scenarios().join("data/pairs.csv");
    let scenario = dir.join("wrong.toml");
    std::fs::write(
        &scenario,
        format!(
            r#"
name = "wrong"
[[data]]
name = "pairs"
file = {pairs:?}
[[operation]]
kind = "call_tool"
weight = 1
tool = "add"
arguments = {{ a = "{{{{pairs.a | number}}}}", b = "{{{{pairs.b | number}}}}" }}
[[operation.check]]
pointer = "/structuredContent/sum"
equals = "{{{{pairs.a | number}}}}"
[[operation]]
kind = "call_tool"
name = "echo_contains"
weight = 1
tool = "echo"
arguments = {{ message = "hello" }}
[[operation.check]]
pointer = "/content/0/text"
contains = "goodbye"
[[operation]]
kind = "list"
weight = 1
what = "tools"
max_latency_ms = 0
[[operation]]
kind = "call_tool"
name = "add_ok_but_error_expected"
weight = 1
tool = "add"
arguments = {{ a = 1, b = 2 }}
is_error = true
"#
        ),
    )
    .unwrap();
    let (output, report) = run(&node, &scenario, &[], &dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stderr.contains("more than --max-errors 0 allows"),
        "{stderr}"
    );
    // No protocol rule was broken: the server answered, only not as the
    // scenario expects.
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    for (name, key) in [
        ("call_tool:add", "check:equals"),
        ("echo_contains", "check:contains"),
        ("list:tools", "check:latency"),
        ("add_ok_but_error_expected", "check:is_error"),
    ] {
        let op = &report["operations"][name];
        assert_eq!(op["ok"], 0, "{name}: {op}");
        let failed = op["failed"].as_u64().unwrap();
        assert!(failed > 0, "{name}: {op}");
        assert_eq!(
            report["errors"][key], failed,
            "{name}: {}",
            report["errors"]
        );
    }
    let sample = report["failure_samples"]["check:equals"].as_str().unwrap();
    assert!(sample.starts_with("call_tool:add: {"), "{sample}");
    assert!(sample.contains("\"sum\""), "{sample}");

    // An error threshold on the whole run takes over from --max-errors' 0.
    let (output, report) = run(&node, &scenario, &["--threshold", "errors<=100%"], &dir);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert_eq!(report["thresholds"][0]["passed"], true);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A broken threshold fails the run (exit 1) and the summary, stderr and
/// the report say which; a threshold on an operation the scenario does not
/// have is refused before the run (exit 64).
#[test]
fn broken_thresholds_fail_the_run_and_say_which() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("thresholds");
    let scenario = scenarios().join("smoke.toml");
    let (output, report) = run(
        &node,
        &scenario,
        &[
            "--threshold",
            "p99<1us",
            "--threshold",
            "echo_call p99<30s",
            "--threshold",
            "rate>1000000/s",
        ],
        &dir,
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stderr.contains("run failed: threshold \"p99<1us\" broken: the run had"),
        "{stderr}"
    );
    assert!(
        stderr.contains("threshold \"rate>1000000/s\" broken"),
        "{stderr}"
    );
    assert!(!stderr.contains("echo_call p99<30s"), "{stderr}");
    assert!(stdout.contains("threshold p99<1us: BROKEN"), "{stdout}");
    let passed: Vec<bool> = report["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["passed"] == true)
        .collect();
    assert_eq!(passed, [false, true, false], "{}", report["thresholds"]);
    assert_eq!(report["total_failed"], 0);

    let output = loadtest(&[
        "run",
        "--url",
        node.url(),
        "--scenario",
        scenario.to_str().unwrap(),
        "--threshold",
        "call_tool:nope p99<1s",
    ]);
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no operation named \"call_tool:nope\""),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The open model offers the rate asked for, whatever the server's speed:
/// every arrival runs exactly one operation or is dropped (every session
/// busy) and counted, and a `dropped` threshold gates on it.
#[test]
fn the_open_model_offers_its_rate_and_counts_dropped_arrivals() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("open");
    let json = dir.join("open.json");
    let output = loadtest(&[
        "run",
        "--url",
        node.url(),
        "--scenario",
        scenarios().join("tools.toml").to_str().unwrap(),
        "--sessions",
        "10",
        "--rate",
        "100",
        "--duration",
        "3",
        "--report",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // 100/s for 3 s: arrivals at 5 ms, 15 ms, ... 2995 ms.
    assert_eq!(
        report["arrivals"]["scheduled"], 300,
        "{}",
        report["arrivals"]
    );
    assert_eq!(report["arrivals"]["dropped"], 0, "{}", report["arrivals"]);
    let operations = report["operations"].as_object().unwrap();
    let ran: u64 = operations
        .iter()
        .filter(|(name, _)| *name != "initialize")
        .map(|(_, op)| op["ok"].as_u64().unwrap() + op["failed"].as_u64().unwrap())
        .sum();
    assert_eq!(ran, 300, "{stdout}");
    assert_eq!(report["operations"]["initialize"]["ok"], 10);
    assert!(
        stdout.contains("open model: 300 arrivals, 0 dropped"),
        "{stdout}"
    );

    // Two sessions, calls of about 500 ms, 20 arrivals a second: most find
    // both sessions busy.
    let slow = dir.join("slow.toml");
    std::fs::write(
        &slow,
        "[[operation]]\nkind = \"long_call\"\nweight = 1\nduration_ms = 500\nsteps = 2\n",
    )
    .unwrap();
    let output = loadtest(&[
        "run",
        "--url",
        node.url(),
        "--scenario",
        slow.to_str().unwrap(),
        "--sessions",
        "2",
        "--stage",
        "1s:20",
        "--stage",
        "1s:20",
        "--start-rate",
        "20",
        "--threshold",
        "dropped<1%",
        "--report",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stderr.contains("threshold \"dropped<1%\" broken"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let scheduled = report["arrivals"]["scheduled"].as_u64().unwrap();
    let dropped = report["arrivals"]["dropped"].as_u64().unwrap();
    let long = &report["operations"]["long_call"];
    assert_eq!(scheduled, 40, "{}", report["arrivals"]);
    assert!(dropped >= 20, "{}", report["arrivals"]);
    assert_eq!(long["failed"], 0, "{long}");
    assert_eq!(long["ok"].as_u64().unwrap() + dropped, scheduled, "{long}");

    // A dropped rule needs arrivals.
    let output = loadtest(&["run", "--url", node.url(), "--threshold", "dropped<1%"]);
    assert_eq!(output.status.code(), Some(64));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Two generators at once, their reports merged into one: counts add up,
/// the thresholds are held again on the whole, HTML included; a broken one
/// fails the merge.
#[test]
fn reports_of_several_generators_merge_into_one() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("merge");
    let scenario = scenarios().join("tools.toml");
    let paths: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("g{i}.json"))).collect();
    let children: Vec<_> = paths
        .iter()
        .map(|path| {
            Command::new(loadtest_binary())
                .args([
                    "run",
                    "--url",
                    node.url(),
                    "--scenario",
                    scenario.to_str().unwrap(),
                    "--sessions",
                    "4",
                    "--duration",
                    "2",
                    "--report",
                    path.to_str().unwrap(),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("running mcp-loadtest")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
    let reports: Vec<Value> = paths
        .iter()
        .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
        .collect();
    let (all, html) = (dir.join("all.json"), dir.join("all.html"));
    let mut args = vec!["merge"];
    args.extend(paths.iter().map(|p| p.to_str().unwrap()));
    args.extend([
        "--report",
        all.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let output = loadtest(&args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let merged: Value = serde_json::from_slice(&std::fs::read(&all).unwrap()).unwrap();
    let sum = |name: &str| -> u64 {
        reports
            .iter()
            .map(|r| r["operations"][name]["ok"].as_u64().unwrap())
            .sum()
    };
    for name in ["initialize", "call_tool:add", "echo_seq", "read_resource"] {
        assert_eq!(merged["operations"][name]["ok"], sum(name), "{name}");
    }
    assert_eq!(merged["sessions"], 8);
    assert_eq!(merged["thresholds"].as_array().unwrap().len(), 3);
    assert!(std::fs::read_to_string(&html).unwrap().contains("<svg"));

    args.extend(["--threshold", "call_tool:add p50<1us"]);
    let output = loadtest(&args);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("threshold \"call_tool:add p50<1us\" broken"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `init` writes a starting scenario from a live server's lists; it loads
/// and runs as written: the read-only tools, the resources and the prompts
/// are called, tools that may change state wait with weight 0.
#[test]
fn init_writes_a_scenario_that_runs_against_the_server_it_listed() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("init");
    let file = dir.join("server.toml");
    let output = loadtest(&[
        "init",
        "--url",
        node.url(),
        "--output",
        file.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("written: 4"), "{stdout}");
    let text = std::fs::read_to_string(&file).unwrap();
    let scenario: toml::Table = toml::from_str(&text).unwrap();
    let operations = scenario["operation"].as_array().unwrap();
    let tool = |name: &str| {
        operations
            .iter()
            .find(|op| op.get("tool").and_then(toml::Value::as_str) == Some(name))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    // Read-only: weight 1, its required argument filled in.
    assert_eq!(tool("echo")["weight"].as_integer(), Some(1));
    assert!(tool("echo")["arguments"]["message"].is_str());
    // Not marked read-only: weight 0 until reviewed.
    assert_eq!(tool("add")["weight"].as_integer(), Some(0));
    assert!(tool("add")["arguments"]["a"].is_float());

    let again = loadtest(&[
        "init",
        "--url",
        node.url(),
        "--output",
        file.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));

    let (output, report) = run(&node, &file, &["--max-errors", "1000000"], &dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    for name in [
        "call_tool:echo",
        "list:tools",
        "read_resource",
        "get_prompt:test_prompt_with_arguments",
    ] {
        let op = &report["operations"][name];
        assert!(
            op["ok"].as_u64().is_some_and(|ok| ok > 0),
            "{name}: {stdout}"
        );
        assert_eq!(op["failed"], 0, "{name}: {stdout}");
    }
    assert!(
        report["operations"].get("call_tool:add").is_none(),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--metrics-listen` serves the generator's figures as Prometheus text
/// while the run goes on.
#[test]
fn the_generator_serves_its_figures_as_prometheus_text_during_the_run() {
    use std::io::{BufRead, BufReader, Read, Write};

    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let mut child = Command::new(loadtest_binary())
        .args([
            "run",
            "--url",
            node.url(),
            "--sessions",
            "2",
            "--duration",
            "4",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("mcp-loadtest: figures at http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let ok = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("mcp_loadtest_operations_total{operation=\"echo_call\",outcome=\"ok\"} ")
        })
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(ok > 0.0, "{text}");
    assert!(text.contains("mcp_loadtest_active_sessions 2"), "{text}");
    assert!(child.wait().unwrap().success());
}

/// Both eras in one run: half the clients open sessions, half speak
/// 2026-07-28 (`server/discover`, `_meta` and routing headers on every
/// request, questions answered by retrying with the request state,
/// `subscriptions/listen`); each runs its era's operations and every
/// answer passes its era's checks.
#[test]
fn both_eras_run_side_by_side_with_their_own_operations_and_checks() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("eras");
    // Long enough that each rare operation (weight 2 in about 50) comes up:
    // about 500 picks per era.
    let scenario = scenarios().join("mixed-eras.toml");
    let (output, report) = run_with(&node, &scenario, "16", "3", &[], &dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    assert_eq!(report["total_failed"], 0, "{stdout}");
    // 16 clients: 8 sessions, 8 stateless clients.
    assert_eq!(report["operations"]["initialize"]["ok"], 8, "{stdout}");
    assert_eq!(report["operations"]["server_discover"]["ok"], 8, "{stdout}");
    for name in [
        "echo_call",
        "call_tool:add",
        "long_call",
        "elicit",
        "listen",
        "get_stream",
        "drop_and_resume",
    ] {
        let op = &report["operations"][name];
        assert!(
            op["ok"].as_u64().is_some_and(|ok| ok > 0),
            "{name}: {stdout}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Whether to make a task is the server's choice, request by request (the
/// tasks extension): a call asked for as a task and answered at once is
/// judged as the call it is, a success when its answer passes the checks,
/// and counted apart so that a server that never makes tasks shows.
#[test]
fn a_call_asked_for_as_a_task_and_answered_at_once_is_judged_as_a_call() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let dir = scratch("at-once");
    let scenario = dir.join("at-once.toml");
    // `echo` is not a task tool (mcp-node answers it at once); `slow_compute`
    // is (it makes a task).
    std::fs::write(
        &scenario,
        r#"
name = "at-once"
protocol_version = "2025-11-25"
stateless_share = 1.0
[[operation]]
kind = "task_call"
name = "echo_as_task"
weight = 1
tool = "echo"
arguments = { message = "hello {{seq}}" }
[[operation.check]]
pointer = "/content/0/text"
equals = "Echo: hello {{seq}}"
[[operation]]
kind = "task_call"
name = "echo_wrong"
weight = 1
tool = "echo"
arguments = { message = "hello" }
[[operation.check]]
pointer = "/content/0/text"
equals = "goodbye"
[[operation]]
kind = "task_call"
weight = 1
tool = "slow_compute"
arguments = { seconds = 0.1, label = "t{{seq}}" }
"#,
    )
    .unwrap();
    let (output, report) = run(&node, &scenario, &["--max-errors", "1000000"], &dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    let ops = &report["operations"];
    let at_once = ops["echo_as_task"]["ok"].as_u64().unwrap_or(0);
    let wrong = ops["echo_wrong"]["failed"].as_u64().unwrap_or(0);
    assert!(at_once > 0, "{stdout}");
    assert_eq!(ops["echo_as_task"]["failed"], 0, "{stdout}");
    // Answered at once, a wrong answer is still a failure.
    assert!(wrong > 0, "{stdout}");
    assert_eq!(ops["echo_wrong"]["ok"], 0, "{stdout}");
    assert_eq!(
        report["tasks_answered_at_once"].as_u64(),
        Some(at_once + wrong),
        "{stdout}"
    );
    // The tool that makes a task still does.
    assert!(
        ops["task_call:slow_compute"]["ok"]
            .as_u64()
            .is_some_and(|ok| ok > 0),
        "{stdout}"
    );
    assert!(
        stdout.contains("calls asked for as tasks and answered at once"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
