//! A node started with a secret in every place a secret can be configured
//! (the request-state keys, the introspection client secret, a password in
//! the Redis URL, a Redis password file, each from a file or a variable)
//! never writes one to its log: the effective-configuration line shows
//! `<redacted>` where each was, and neither the start, nor Redis retries,
//! nor a request through introspection prints one.

use std::path::PathBuf;

use mcp_cluster_testkit::{IssuerOptions, NodeProcess, TestIssuer, node_binary};

const STATE_KEY_FILE: &str = "c3RhdGUta2V5LW9uZS1vZi0zMi1ieXRlcy1sb25nISE=";
const STATE_KEY_ENV: &str = "ZW52LXN0YXRlLWtleS10d28tMzItYnl0ZXMtbG9uZyE=";
const CLIENT_SECRET: &str = "introspection-s3cret-0f4a";
const URL_PASSWORD: &str = "url-pa55word-77c1";
const FILE_PASSWORD: &str = "file-pa55word-91d2";

/// Debug for the workspace's own targets, the access log on.
const LOG: &str = "info,mcp_node=debug,mcp_cluster=debug,mcp_cluster_auth=debug,mcp_cluster_redis=debug,\
                   mcp_cluster_runtime=debug,mcp_access=info";

fn dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mcp-secrets-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A port nothing listens on: Redis is never reached, the node retries
/// (and logs each retry with the URL).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[track_caller]
fn assert_no_secret(node: &NodeProcess, secrets: &[&str]) {
    let log = node.log();
    assert!(!log.is_empty());
    for line in &log {
        for secret in secrets {
            assert!(!line.contains(secret), "{secret:?} in the log: {line}");
        }
    }
}

#[tokio::test]
async fn secrets_from_a_file_never_reach_the_log() {
    let issuer = TestIssuer::start_with(IssuerOptions {
        client_secret: CLIENT_SECRET.to_owned(),
        ..IssuerOptions::default()
    })
    .await
    .unwrap();
    let path = dir().join("auth.toml");
    std::fs::write(
        &path,
        format!(
            "[runtime]\nrequest_state_keys = [\"k1:{STATE_KEY_FILE}\"]\n\
             [quotas]\ninitialize_per_address = 3\n\
             [auth]\nresource = \"http://127.0.0.1:1/mcp\"\nissuers = [\"{}\"]\n\
             [auth.introspection]\nclient_id = \"{}\"\nclient_secret = \"{CLIENT_SECRET}\"\n",
            issuer.issuer(),
            issuer.client_id(),
        ),
    )
    .unwrap();
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", LOG, "--config", path.to_str().unwrap()],
        &[],
    )
    .unwrap_or_else(|err| panic!("node: {err:#}"));
    let config = node.wait_for_log("Effective configuration.").unwrap();
    // Each secret is there, redacted (so the test looks where they were).
    assert!(
        config.contains("request_state_keys: [\"<redacted>\"]"),
        "{config}"
    );
    assert!(
        config.contains("client_secret: Some(\"<redacted>\")"),
        "{config}"
    );
    // Each quota once, as applied.
    assert_eq!(
        config.matches("initialize_per_address").count(),
        1,
        "{config}"
    );
    assert!(config.contains("initialize_per_address: 3"), "{config}");
    // An opaque token goes through introspection, with the client secret.
    let token = issuer.opaque_token(
        true,
        serde_json::json!({"aud": "http://127.0.0.1:1/mcp", "scope": "mcp:tools"}),
    );
    let answer = reqwest::Client::new()
        .post(node.url())
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert!(issuer.introspections() >= 1, "{answer:?}");
    node.wait_for_log("mcp_access").unwrap();
    assert_no_secret(&node, &[STATE_KEY_FILE, CLIENT_SECRET, "k1:c3Rh"]);

    let path = dir().join("redis.toml");
    std::fs::write(
        &path,
        format!(
            "[redis]\nurl = \"redis://mcp:{URL_PASSWORD}@127.0.0.1:{}\"\n",
            closed_port()
        ),
    )
    .unwrap();
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", LOG, "--config", path.to_str().unwrap()],
        &[],
    )
    .unwrap_or_else(|err| panic!("node: {err:#}"));
    let config = node.wait_for_log("Effective configuration.").unwrap();
    assert!(config.contains("redis://mcp:***@127.0.0.1"), "{config}");
    node.wait_for_log("Session store not connected yet")
        .unwrap();
    assert_no_secret(&node, &[URL_PASSWORD]);
}

#[test]
fn secrets_from_variables_and_files_never_reach_the_log() {
    let password = dir().join("redis-password");
    std::fs::write(&password, format!("{FILE_PASSWORD}\n")).unwrap();
    let url = format!("redis://mcp@127.0.0.1:{}", closed_port());
    let key = format!("k2:{STATE_KEY_ENV}");
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", LOG],
        &[
            ("MCP_REDIS_URL", url.as_str()),
            ("MCP_REDIS_PASSWORD_FILE", password.to_str().unwrap()),
            ("MCP_RUNTIME__REQUEST_STATE_KEYS", key.as_str()),
        ],
    )
    .unwrap_or_else(|err| panic!("node: {err:#}"));
    let config = node.wait_for_log("Effective configuration.").unwrap();
    assert!(
        config.contains("request_state_keys: [\"<redacted>\"]"),
        "the variable is applied, and redacted: {config}"
    );
    node.wait_for_log("Session store not connected yet")
        .unwrap();
    assert_no_secret(&node, &[STATE_KEY_ENV, FILE_PASSWORD]);
}
