//! The load generator against servers that are not ours, with counts that
//! must be exactly right: the official TypeScript SDK's example server
//! (`simpleStreamableHttp`), an echo server on the official Python SDK
//! (`loadtest/peers/py-echo`), one on rmcp (`loadtest/peers/rmcp-echo`), and a
//! server that answers wrongly on purpose
//! (`loadtest/examples/faulty_server.rs`), whose every wrong answer must be
//! a failure and every right one a success. The SDKs come from `npm ci
//! --prefix tests/js` and the virtualenv `tests/py/.venv`
//! (`tests/run-all.sh` installs both).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use mcp_cluster_testkit::{
    example_binary, free_port, loadtest, loadtest_scenario, raw_http, wait_serving,
};
use serde_json::Value;

/// A server process, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `command`, then waits until it answers HTTP on `port`.
    fn start(mut command: Command, port: u16) -> Self {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("starting {command:?}: {err}"));
        let mut server = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        if let Err(err) = wait_serving(&mut server.child, addr, Duration::from_secs(30)) {
            panic!("{command:?}: {err}");
        }
        server
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `run` of `scenario` against `url`; returns the output and the report.
fn run(url: &str, scenario: &str, extra: &[&str]) -> (Output, Value) {
    let dir = std::env::temp_dir().join(format!(
        "mcp-loadtest-third-party-{}-{}",
        std::process::id(),
        free_port().unwrap()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let mut args = vec![
        "run",
        "--url",
        url,
        "--scenario",
        scenario,
        "--sessions",
        "8",
        "--duration",
        "3",
        "--report",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = loadtest(&args);
    let report = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (output, report)
}

/// Every operation of `names` ran and none failed.
fn all_ok(report: &Value, names: &[&str], stdout: &str) {
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    assert_eq!(report["total_failed"], 0, "{stdout}");
    for name in names {
        let op = &report["operations"][name];
        assert!(
            op["ok"].as_u64().is_some_and(|ok| ok > 0),
            "{name}: {stdout}"
        );
    }
}

fn js_node() -> PathBuf {
    let node = root().join("tests/js/node_modules/.bin/node");
    assert!(
        node.exists(),
        "{} missing: run `npm ci --prefix tests/js` (tests/run-all.sh does)",
        node.display()
    );
    node
}

#[test]
fn the_typescript_sdk_example_server_is_measured_with_no_false_errors() {
    let port = free_port().unwrap();
    let js = root().join("tests/js");
    let mut command = Command::new(js_node());
    command
        .arg("--import")
        .arg(js.join("force-loopback.mjs"))
        .arg(js.join(
            "node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js",
        ))
        .env("MCP_PORT", port.to_string());
    let server = Server::start(command, port);

    let (output, report) = run(&server.url, &loadtest_scenario("ts-sdk-example.toml"), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    all_ok(
        &report,
        &[
            "initialize",
            "call_tool:greet",
            "get_prompt:greeting-template",
            "read_resource",
            "list:tools",
        ],
        &stdout,
    );

    // What `init` writes for it loads and runs with no protocol violation.
    let file = std::env::temp_dir().join(format!("ts-sdk-example-{port}.toml"));
    let output = loadtest(&[
        "init",
        "--url",
        &server.url,
        "--output",
        file.to_str().unwrap(),
        "--force",
    ]);
    assert!(output.status.success());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("tool = \"greet\""), "{text}");
    let (output, report) = run(
        &server.url,
        file.to_str().unwrap(),
        &["--max-errors", "1000000"],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    assert!(
        report["operations"]["list:tools"]["ok"].as_u64() > Some(0),
        "{stdout}"
    );
    std::fs::remove_file(&file).unwrap();
}

#[test]
fn an_echo_server_on_the_python_sdk_is_measured_with_no_false_errors() {
    let python = root().join("tests/py/.venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: tests/run-all.sh makes it",
        python.display()
    );
    let port = free_port().unwrap();
    let mut command = Command::new(python);
    command
        .arg(root().join("loadtest/peers/py-echo/server.py"))
        .arg(format!("127.0.0.1:{port}"));
    let server = Server::start(command, port);
    let (output, report) = run(&server.url, &loadtest_scenario("echo-tool.toml"), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    all_ok(
        &report,
        &["initialize", "echo", "echo_call", "tools_list"],
        &stdout,
    );
}

/// The faulty server: `fault` on every `every`-th call.
fn faulty(fault: &str, every: u32) -> (Server, u16) {
    let mut child = Command::new(example_binary("faulty_server"))
        .args(["127.0.0.1:0", fault, &every.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting faulty_server (cargo build -p mcp-loadtest --examples)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    let url = format!("http://127.0.0.1:{port}/mcp");
    (Server { child, url }, port)
}

/// A number the faulty server reports (`GET /faults`, `GET /calls`).
fn counter(port: u16, path: &str) -> u64 {
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let (status, body) = raw_http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    body.trim().parse().unwrap_or_else(|_| panic!("{body}"))
}

#[test]
fn every_wrong_answer_is_a_failure_and_every_right_one_a_success() {
    let echo = loadtest_scenario("echo-tool.toml");
    // (fault, the error keys its wrong answers must be counted under: the
    // scenario's check for `echo`, the built-in rule for `echo_call`)
    for (fault, keys) in [
        ("none", &[][..]),
        ("wrong_text", &["check:equals", "protocol:wrong_result"][..]),
        ("wrong_id", &["protocol:wrong_id"][..]),
        ("is_error", &["tool_error"][..]),
        ("http_500", &["http_status:500"][..]),
        ("jsonrpc_error", &["jsonrpc:-32603"][..]),
        ("no_result", &["protocol:malformed_message"][..]),
        ("sse_duplicate", &["protocol:duplicate_response"][..]),
        (
            "empty_content",
            &["check:equals", "protocol:wrong_result"][..],
        ),
    ] {
        let (server, port) = faulty(fault, 7);
        let (output, report) = run(&server.url, &echo, &["--max-errors", "1000000"]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let calls = counter(port, "/calls");
        let faults = counter(port, "/faults");
        let ops = &report["operations"];
        let call_ops = ["echo", "echo_call"];
        let ok: u64 = call_ops
            .iter()
            .map(|n| ops[n]["ok"].as_u64().unwrap_or(0))
            .sum();
        let failed: u64 = call_ops
            .iter()
            .map(|n| ops[n]["failed"].as_u64().unwrap_or(0))
            .sum();
        assert!(calls > 100, "{fault}: {calls} calls\n{stdout}");
        // Every call answered, right or wrong, is counted once, as what it was.
        assert_eq!(ok + failed, calls, "{fault}\n{stdout}");
        assert_eq!(failed, faults, "{fault}\n{stdout}");
        if fault == "none" {
            assert_eq!(faults, 0);
            assert_eq!(report["total_failed"], 0, "{stdout}");
            assert!(output.status.success(), "{stdout}");
        } else {
            assert!(faults > 10, "{fault}: {faults}");
            let counted: u64 = keys
                .iter()
                .map(|k| report["errors"][k].as_u64().unwrap_or(0))
                .sum();
            assert_eq!(counted, faults, "{fault}: {}", report["errors"]);
            // The run does not pass: a threshold of 0.1 % errors is broken.
            assert_eq!(output.status.code(), Some(1), "{fault}\n{stdout}");
        }
    }
}

/// The k6 script `loadtest/README.md` shows beside the scenario is the
/// file `loadtest/k6/ts-sdk-example.js`, byte for byte, and parses as the
/// ES module k6 runs (`node --check`; k6 itself is not installed here).
#[test]
fn the_k6_script_of_the_readme_is_its_file_and_parses() {
    let readme = std::fs::read_to_string(root().join("loadtest/README.md")).unwrap();
    let file = std::fs::read_to_string(root().join("loadtest/k6/ts-sdk-example.js")).unwrap();
    let marker = "<!-- file: loadtest/k6/ts-sdk-example.js -->\n```js\n";
    let start = readme.find(marker).expect("the marker and its js block") + marker.len();
    let end = start + readme[start..].find("```\n").expect("the block's end");
    assert_eq!(&readme[start..end], file, "README block and file differ");

    let copy = std::env::temp_dir().join(format!("k6-{}.mjs", std::process::id()));
    std::fs::write(&copy, &file).unwrap();
    let output = Command::new(js_node())
        .arg("--check")
        .arg(&copy)
        .output()
        .unwrap();
    std::fs::remove_file(&copy).unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn an_echo_server_on_rmcp_is_measured_with_no_false_errors() {
    let binary = root().join("target/peers-cargo/debug/rmcp-echo");
    assert!(
        binary.exists(),
        "{} missing: tests/run-all.sh builds it (cargo build --manifest-path loadtest/peers/rmcp-echo/Cargo.toml --target-dir target/peers-cargo)",
        binary.display()
    );
    let port = free_port().unwrap();
    let mut command = Command::new(binary);
    command.arg(format!("127.0.0.1:{port}")).arg("1");
    let server = Server::start(command, port);
    let (output, report) = run(&server.url, &loadtest_scenario("echo-tool.toml"), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    all_ok(
        &report,
        &["initialize", "echo", "echo_call", "tools_list"],
        &stdout,
    );
}
