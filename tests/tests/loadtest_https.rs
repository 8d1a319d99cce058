//! The load generator against protected deployments: an HTTPS node reached
//! with `--ca-file` (and not without it), and a node with authorization,
//! whose 401 and 403 answers are counted apart, by kind, and always as
//! failures, while a token with the right scope gets correct answers. The
//! token given on the command line never shows in the report.

mod auth_support;
mod tls_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use auth_support::{RESOURCE, config_file, node};
use mcp_cluster_testkit::{
    TestIssuer, TestPki, loadtest_binary, loadtest_output, loadtest_scenario,
};
use serde_json::Value;

/// A directory of this test binary's, for one use (`name`); the caller
/// removes it.
fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("mcp-loadtest-https-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs the load generator with `args` (and `env`); its output.
fn loadtest(args: &[&str], env: &[(&str, &str)]) -> Output {
    loadtest_output(
        Command::new(loadtest_binary())
            .args(args)
            // Only the token a test gives, never one of the environment.
            .env_remove("MCP_LOADTEST_BEARER_TOKEN")
            .envs(env.iter().copied()),
    )
}

/// A scenario of cheap requests with a pause between them (a few
/// requests per second and session): under the node's per-principal
/// request quota.
fn calm_scenario(dir: &Path) -> String {
    let path = dir.join("calm.toml");
    std::fs::write(
        &path,
        "name = \"calm\"\nthink_time_ms = 200\n\n[[operation]]\nkind = \"tools_list\"\n\
         weight = 1\n\n[[operation]]\nkind = \"echo_call\"\nweight = 2\nmessage = \"calm\"\n",
    )
    .unwrap();
    path.display().to_string()
}

/// A two-second `run` of 4 sessions against `url` with `extra` arguments;
/// its JSON report and stdout. Checks that the run exits 0 exactly when
/// its report counts no error and no protocol violation, and 1 otherwise.
fn run(url: &str, name: &str, extra: &[&str], env: &[(&str, &str)]) -> (Value, String) {
    let dir = temp_dir(name);
    let json = dir.join("report.json");
    let mut args = vec![
        "run",
        "--url",
        url,
        "--sessions",
        "4",
        "--duration",
        "2",
        "--report",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = loadtest(&args, env);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    // A run passes only when nothing failed (--max-errors is 0 by default):
    // its exit status says what its report counts.
    let errors: u64 = report["errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    let clean = errors == 0 && report["protocol_violations"] == 0;
    assert_eq!(output.status.success(), clean, "{stdout}");
    if !clean {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("mcp-loadtest: run failed"), "{stderr}");
    }
    (report, stdout)
}

#[test]
fn the_load_generator_runs_against_an_https_node_with_its_ca_file() {
    let pki = TestPki::new().unwrap();
    let node = tls_support::https_node(&pki, &["--log", "warn"], &[]);
    let ca = pki.ca_cert();
    let ca = ca.to_str().unwrap();
    let mixed = loadtest_scenario("mixed.toml");
    let (report, stdout) = run(
        node.url(),
        "https",
        &["--ca-file", ca, "--scenario", &mixed],
        &[],
    );
    assert_eq!(report["protocol_violations"], 0, "{stdout}");
    assert_eq!(report["total_failed"], 0, "{stdout}");
    // The scenario picks operations at random: in two seconds on a loaded
    // machine the rarer ones (long calls, drop and resume) may not come up,
    // but sessions and calls always do; none failed (total_failed above).
    for kind in ["initialize", "echo_call"] {
        let op = &report["operations"][kind];
        assert!(op["ok"].as_u64().is_some_and(|ok| ok > 0), "{kind}: {op}");
    }

    // `hold` takes the same flags.
    let output = loadtest(
        &[
            "hold",
            "--url",
            node.url(),
            "--ca-file",
            ca,
            "--sessions",
            "3",
            "--get-stream",
            "--hold",
            "0",
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("hold sessions=3 streams=3"), "{stdout}");

    // Without the CA file the node's certificate is not trusted: nothing
    // succeeds, and nothing is counted as a success.
    let (report, stdout) = run(node.url(), "https-untrusted", &[], &[]);
    assert_eq!(report["total_ok"], 0, "{stdout}");
    assert!(
        report["errors"]["transport"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{stdout}"
    );
}

#[tokio::test]
async fn refusals_of_an_authorizing_node_are_failures_counted_by_kind() {
    let issuer = TestIssuer::start().await.unwrap();
    let config = config_file(
        "loadtest",
        &issuer,
        RESOURCE,
        "required_scopes = [\"mcp:tools\"]",
        "",
    );
    let node = node(&config);
    let url = node.url().to_owned();

    // No token: 401 for every attempt to open a session.
    let (report, stdout) = run(&url, "no-token", &[], &[]);
    let refusals = &report["refusals"];
    assert!(
        refusals["unauthorized_401"].as_u64().is_some_and(|n| n > 0),
        "{stdout}"
    );
    assert_eq!(refusals["forbidden_403"], 0, "{stdout}");
    assert_eq!(report["total_ok"], 0, "{stdout}");
    assert_eq!(
        report["total_failed"], refusals["unauthorized_401"],
        "{stdout}"
    );
    assert_eq!(
        report["errors"]["refused:401_unauthorized"],
        refusals["unauthorized_401"]
    );
    assert!(
        stdout.contains("refused (failures): 401 unauthorized"),
        "{stdout}"
    );

    // A token without the scope every request needs: 403.
    let unscoped = issuer.token().audience(RESOURCE).sign();
    let (report, stdout) = run(
        &url,
        "unscoped",
        &[],
        &[("MCP_LOADTEST_BEARER_TOKEN", unscoped.as_str())],
    );
    assert!(
        report["refusals"]["forbidden_403"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{stdout}"
    );
    assert_eq!(report["refusals"]["unauthorized_401"], 0, "{stdout}");
    assert_eq!(report["total_ok"], 0, "{stdout}");

    // The right token, on the command line or in a file: correct answers.
    // Every session is the same principal; should its request quota still
    // answer 429, those are failures, counted as refusals too.
    let good = issuer
        .token()
        .audience(RESOURCE)
        .scopes(["mcp:tools"])
        .sign();
    let files = temp_dir("files");
    let calm = calm_scenario(&files);
    let answered = |report: &Value, stdout: &str| {
        assert!(
            report["total_ok"].as_u64().is_some_and(|n| n > 0),
            "{stdout}"
        );
        assert_eq!(report["protocol_violations"], 0, "{stdout}");
        assert_eq!(report["refusals"]["unauthorized_401"], 0, "{stdout}");
        assert_eq!(report["refusals"]["forbidden_403"], 0, "{stdout}");
        assert_eq!(
            report["total_failed"], report["refusals"]["too_many_requests_429"],
            "{stdout}"
        );
    };
    let (report, stdout) = run(
        &url,
        "token",
        &["--bearer-token", &good, "--scenario", &calm],
        &[],
    );
    answered(&report, &stdout);
    let command = report["command"].as_str().unwrap();
    assert!(!command.contains(&good), "{command}");
    assert!(command.contains("--bearer-token ***"), "{command}");

    let token_file = files.join("token");
    std::fs::write(&token_file, format!("{good}\n")).unwrap();
    let (report, stdout) = run(
        &url,
        "token-file",
        &[
            "--bearer-token-file",
            token_file.to_str().unwrap(),
            "--scenario",
            &calm,
        ],
        &[],
    );
    answered(&report, &stdout);
    std::fs::remove_dir_all(files).unwrap();
}
