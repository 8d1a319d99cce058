//! Every configuration error (a bad flag value, a bad variable, a flag
//! without its pair, an unknown flag, a missing or bad file) exits with 64
//! and one line on stderr naming the flag, variable or file and the reason,
//! as the README's "Running a node" says; `--help` and `--version` exit 0.

use std::process::{Command, Output, Stdio};

use mcp_cluster_testkit::{NodeProcess, node_binary};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(node_binary());
    command.args(args).stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

/// Runs the node, expects exit 64 and one stderr line holding every piece
/// of `says`; returns that line.
#[track_caller]
fn refused(args: &[&str], env: &[(&str, &str)], says: &[&str]) -> String {
    let output = run(args, env);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(64), "{args:?} {env:?}: {stderr}");
    let line = stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "one line: {stderr:?}");
    assert!(line.starts_with("mcp-node: "), "{line}");
    for piece in says {
        assert!(line.contains(piece), "{piece:?} missing from {line:?}");
    }
    line.to_owned()
}

#[test]
fn a_bad_flag_value_exits_64_naming_the_flag() {
    refused(
        &["--max-sessions", "abc"],
        &[],
        &["--max-sessions", "'abc'", "invalid digit"],
    );
    refused(&["--bind", "nowhere"], &[], &["--bind", "'nowhere'"]);
    refused(
        &["--response-mode", "fast"],
        &[],
        &["--response-mode", "auto, sse"],
    );
    // A value that parses but cannot work: the setting is named.
    refused(
        &["--max-body-bytes", "10"],
        &[],
        &["http.max_body_bytes", "1024"],
    );
    // A write-stall timeout of 0 would close every stream a moment behind.
    refused(
        &["--sse-write-stall-timeout-secs", "0"],
        &[],
        &["http.sse_write_stall_timeout_secs", "positive"],
    );
    refused(
        &[],
        &[("MCP_HTTP__SSE_WRITE_STALL_TIMEOUT_SECS", "0")],
        &["http.sse_write_stall_timeout_secs", "positive"],
    );
}

#[test]
fn a_bad_flag_variable_exits_64_naming_the_variable() {
    let line = refused(
        &[],
        &[("MCP_MAX_SESSIONS", "abc")],
        &["MCP_MAX_SESSIONS", "'abc'"],
    );
    assert!(line.starts_with("mcp-node: MCP_MAX_SESSIONS: "), "{line}");
    refused(
        &[],
        &[("MCP_LOG_JSON", "maybe")],
        &["MCP_LOG_JSON", "'maybe'", "not a boolean"],
    );
}

#[test]
fn a_bad_setting_variable_exits_64_naming_the_variable() {
    refused(
        &[],
        &[("MCP_HTTP__MAX_BODY_BYTES", "-5")],
        &["MCP_HTTP__MAX_BODY_BYTES", "-5"],
    );
    refused(
        &[],
        &[("MCP_HTTP__LEGACY_SSE", "maybe")],
        &["MCP_HTTP__LEGACY_SSE", "not a boolean"],
    );
}

#[test]
fn a_flag_without_its_pair_exits_64_naming_the_missing_one() {
    refused(&["--tls-cert", "a.pem"], &[], &["--tls-key"]);
    refused(&["--tls-key", "a.key"], &[], &["--tls-cert"]);
    refused(
        &["--redis-client-cert", "c.pem"],
        &[],
        &["--redis-client-key"],
    );
}

#[test]
fn a_usage_error_exits_64() {
    refused(&["--max-sesions", "5"], &[], &["--max-sesions"]);
    refused(&["serve"], &[], &["'serve'"]);
}

#[test]
fn a_missing_or_bad_config_file_exits_64_naming_the_file() {
    refused(
        &["--config", "/nonexistent/mcp-node.toml"],
        &[],
        &["/nonexistent/mcp-node.toml", "No such file"],
    );
    let dir = std::env::temp_dir().join(format!("mcp-startup-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let unknown = dir.join("unknown.toml");
    std::fs::write(&unknown, "bind = \"127.0.0.1:0\"\nnonsense = 1\n").unwrap();
    refused(
        &["--config", unknown.to_str().unwrap()],
        &[],
        &[unknown.to_str().unwrap(), "line 2", "nonsense"],
    );
    let no_token = dir.join("no-token.toml");
    std::fs::write(
        &no_token,
        "[[upstreams]]\nname = \"r\"\nurls = [\"http://127.0.0.1:9/mcp\"]\nbearer_token_file = \"/nonexistent/token\"\n",
    )
    .unwrap();
    refused(
        &["--config", no_token.to_str().unwrap()],
        &[],
        &["bearer_token_file /nonexistent/token", "No such file"],
    );
    let typed = dir.join("typed.toml");
    std::fs::write(&typed, "[runtime]\nmax_sessions = \"many\"\n").unwrap();
    refused(
        &[],
        &[("MCP_CONFIG", typed.to_str().unwrap())],
        &[typed.to_str().unwrap(), "line 2", "expected usize"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn help_and_version_exit_0() {
    let help = run(&["--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("Usage: mcp-node"), "{text}");
    let admin = text.split("--admin-bind").nth(1).unwrap();
    let admin = admin.split("--").next().unwrap().split_whitespace();
    let admin = admin.collect::<Vec<_>>().join(" ");
    assert!(admin.contains("/healthz, /readyz and /metrics"), "{admin}");
    let version = run(&["--version"], &[]);
    assert_eq!(version.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("mcp-node "));
}

#[test]
fn log_json_variable_takes_1_and_0() {
    for (value, json) in [("1", true), ("true", true), ("0", false), ("off", false)] {
        let mut node = NodeProcess::spawn_logged(
            &node_binary(),
            &["--log", "info"],
            &[("MCP_LOG_JSON", value)],
        )
        .unwrap_or_else(|err| panic!("MCP_LOG_JSON={value}: node did not start: {err:#}"));
        let line = node.wait_for_log("Effective configuration.").unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&line).is_ok(),
            json,
            "MCP_LOG_JSON={value}: {line}"
        );
        assert!(node.is_running());
    }
}
