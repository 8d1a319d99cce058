//! A Redis URL never shows its password, however it is mistyped: a URL
//! the node cannot read (a `/` in the password, as base64 passwords have,
//! in each form the node accepts; a mistyped `redis://`) exits with 64 and
//! one line showing the URL as its scheme and host, or `(unparsable)`; a
//! password in the query (`?password=`, which the Redis client ignores) is
//! refused the same way; and a URL the node accepts shows its password and
//! query values as `***` in every line it logs, the retries included.
//! Before: each of these printed the password, on the exit line or on
//! every retry line.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use mcp_cluster_testkit::{GUARD, NodeProcess, node_binary};

/// The password of every URL below; its halves must not show either.
const SECRET: &str = "Zm9vYmFy/c2VjcmV0+cXV4eg==";
const PARTS: [&str; 2] = ["Zm9vYmFy", "c2VjcmV0"];

/// A port nothing listens on: Redis is never reached, the node retries.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs so far, naming their configuration files.
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// How a URL reaches the node.
#[derive(Debug, Clone, Copy)]
enum Given {
    Flag,
    FlagVariable,
    SettingVariable,
    File,
}

const EVERY_WAY: [Given; 4] = [
    Given::Flag,
    Given::FlagVariable,
    Given::SettingVariable,
    Given::File,
];

/// Runs the node with `url` given `how`; it must exit (a bad URL never gets
/// better by waiting) within [`GUARD`]. Returns its exit code and stderr.
fn run(url: &str, how: Given) -> (Option<i32>, String) {
    let mut command = Command::new(node_binary());
    command
        .args(["--bind", "127.0.0.1:0", "--log", "debug"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let file = std::env::temp_dir().join(format!(
        "mcp-redis-url-{}-{}.toml",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    match how {
        Given::Flag => {
            command.args(["--redis-url", url]);
        }
        Given::FlagVariable => {
            command.env("MCP_REDIS_URL", url);
        }
        Given::SettingVariable => {
            command.env("MCP_REDIS__URL", url);
        }
        Given::File => {
            std::fs::write(&file, format!("[redis]\nurl = {url:?}\n")).unwrap();
            command.arg("--config").arg(&file);
        }
    }
    let mut child = command.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if waited >= GUARD {
            let _ = child.kill();
            let _ = child.wait();
            let text = reader.join().unwrap();
            panic!("{url:?} ({how:?}): the node did not exit:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
        waited += Duration::from_millis(20);
    };
    let _ = std::fs::remove_file(&file);
    (status.code(), reader.join().unwrap())
}

#[track_caller]
fn assert_hidden(text: &str, url: &str) {
    for part in PARTS {
        assert!(!text.contains(part), "{url:?}: {part:?} shown in:\n{text}");
    }
}

#[test]
fn an_unreadable_url_exits_64_showing_its_scheme_and_host_at_most() {
    let port = closed_port();
    for (url, shown) in [
        // A '/' in the password: the host ends early, the rest looks like a
        // path, and the client cannot read it.
        (
            format!("redis://:{SECRET}@127.0.0.1:{port}"),
            format!("url redis://127.0.0.1:{port}:"),
        ),
        (
            format!("rediss://mcp:{SECRET}@127.0.0.1:{port}/0"),
            format!("url rediss://127.0.0.1:{port}:"),
        ),
        (
            format!("redis+sentinel://mcp:{SECRET}@127.0.0.1:{port},127.0.0.1:1/mymaster"),
            format!("url redis+sentinel://127.0.0.1:{port},127.0.0.1:1:"),
        ),
        (
            format!("rediss+cluster://mcp:{SECRET}@127.0.0.1:{port}"),
            format!("url rediss+cluster://127.0.0.1:{port}:"),
        ),
        // A mistyped scheme.
        (
            format!("redis//:{SECRET}@127.0.0.1:{port}"),
            "url (unparsable):".to_owned(),
        ),
        (
            format!("redis:/mcp:{SECRET}@127.0.0.1:{port}"),
            "url (unparsable):".to_owned(),
        ),
        // A password in the query, which the Redis client would ignore.
        (
            format!("redis://127.0.0.1:{port}/?password={SECRET}"),
            format!("url redis://127.0.0.1:{port}: a password in the query"),
        ),
        (
            format!("redis+sentinel://127.0.0.1:{port}/mymaster?password={SECRET}"),
            format!("url redis+sentinel://127.0.0.1:{port}:"),
        ),
    ] {
        for how in EVERY_WAY {
            let (code, stderr) = run(&url, how);
            assert_hidden(&stderr, &url);
            assert_eq!(code, Some(64), "{url:?} ({how:?}):\n{stderr}");
            let line = stderr.trim_end();
            assert_eq!(
                line.lines().count(),
                1,
                "{url:?} ({how:?}): one line:\n{stderr}"
            );
            assert!(
                line.starts_with("mcp-node: ") && line.contains(&shown),
                "{url:?} ({how:?}): {shown:?} missing from {line:?}"
            );
        }
    }
}

#[test]
fn an_accepted_url_shows_its_password_and_query_values_as_stars() {
    let port = closed_port();
    let encoded = SECRET.replace('/', "%2F").replace('+', "%2B");
    for (url, shown) in [
        (
            format!("redis://:{encoded}@127.0.0.1:{port}/0"),
            format!("redis://:***@127.0.0.1:{port}/0"),
        ),
        (
            format!("redis+sentinel://mcp:{encoded}@127.0.0.1:{port}/mymaster"),
            format!("redis+sentinel://mcp:***@127.0.0.1:{port}/mymaster"),
        ),
        (
            format!("redis+cluster://mcp:{encoded}@127.0.0.1:{port}"),
            format!("redis+cluster://mcp:***@127.0.0.1:{port}"),
        ),
        // The one query password the client reads: a Unix socket's.
        (
            format!("redis+unix:///nonexistent/redis-{port}.sock?pass={encoded}"),
            format!("redis+unix:///nonexistent/redis-{port}.sock?pass=***"),
        ),
    ] {
        let node = NodeProcess::spawn_logged(
            &node_binary(),
            &["--log", "debug", "--redis-url", &url],
            &[],
        )
        .unwrap_or_else(|err| panic!("{url}: node: {err:#}"));
        let config = node.wait_for_log("Effective configuration.").unwrap();
        assert!(
            config.contains(&shown),
            "{url}: {shown} missing from {config}"
        );
        // The first retries are each logged, with the URL.
        let retry = node
            .wait_for_log("Session store not connected yet")
            .unwrap();
        assert!(
            retry.contains(&shown),
            "{url}: {shown} missing from {retry}"
        );
        node.wait_for_log("attempt=2").unwrap();
        let log = node.log().join("\n");
        assert_hidden(&log, &url);
        assert!(!log.contains(&encoded), "{url}: shown in:\n{log}");
    }
}
