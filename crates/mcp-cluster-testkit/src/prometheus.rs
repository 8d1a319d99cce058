//! A real Prometheus server for one test: on a free loopback port, scraping
//! the given nodes' `/metrics` every second (job `mcp-node`), optionally
//! evaluating rule files every second, with its TSDB, config and log in a
//! directory of its own that is removed on drop. Queried over its HTTP API
//! with plain HTTP/1.0 on a `TcpStream`, so the testkit needs no HTTP client.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

/// The scrape job every target belongs to (the `job` label), as in
/// `deploy/prometheus/prometheus.yml`.
pub const PROMETHEUS_JOB: &str = "mcp-node";

/// Startup attempts when the chosen port is taken between picking it and
/// Prometheus binding it.
const START_ATTEMPTS: usize = 3;
/// How long Prometheus may take to open its TSDB and report ready: well
/// above the second or two it needs, for a loaded CI machine.
const READY_LIMIT: Duration = Duration::from_secs(60);
/// Pause between readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// Lines of Prometheus's own log quoted in error messages.
const LOG_LINES_QUOTED: usize = 40;

/// Distinguishes the directories of several instances in one process.
static INSTANCE: AtomicUsize = AtomicUsize::new(0);

/// A `prometheus` child process on `127.0.0.1:<port>`; killed on drop, its
/// directory removed.
#[derive(Debug)]
pub struct Prometheus {
    addr: SocketAddr,
    /// The server. Killed and reaped on drop.
    child: Child,
    /// Config, TSDB and log; removed on drop after the process is gone.
    dir: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (`host:port`, path `/metrics`)
    /// every second and waits until it reports ready.
    ///
    /// # Errors
    /// `prometheus` is not installed, rejects the config, exits, or is not
    /// ready within a minute.
    pub fn start(targets: &[SocketAddr]) -> anyhow::Result<Self> {
        Self::start_with_rules(targets, &[])
    }

    /// As [`Self::start`], also loading `rule_files` (evaluated every
    /// second).
    ///
    /// # Errors
    /// As [`Self::start`]; also when a rule file does not load.
    pub fn start_with_rules(targets: &[SocketAddr], rule_files: &[&Path]) -> anyhow::Result<Self> {
        if targets.is_empty() {
            bail!("prometheus needs at least one target");
        }
        let binary = prometheus_binary()?;
        let rule_files = rule_files
            .iter()
            .map(|path| {
                std::fs::canonicalize(path).with_context(|| format!("rule file {}", path.display()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let addr = SocketAddr::from(([127, 0, 0, 1], crate::free_port()?));
            match Self::spawn(&binary, addr, targets, &rule_files) {
                Ok(prometheus) => return Ok(prometheus),
                Err(err) => last_err = Some(err),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("prometheus did not start")))
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `GET path_and_query` on the HTTP API; returns the whole JSON answer
    /// (`status`, `data` or `errorType` and `error`), whatever its status.
    /// Blocking.
    ///
    /// # Errors
    /// The request failed or the answer is not JSON.
    pub fn api(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let (status, body) = get(self.addr, path_and_query)?;
        serde_json::from_str(&body)
            .with_context(|| format!("GET {path_and_query}: HTTP {status}, not JSON: {body}"))
    }

    /// Runs the instant query `promql` now (`/api/v1/query`) and returns the
    /// whole answer, an error included (for checking that an expression
    /// parses). Blocking.
    ///
    /// # Errors
    /// The request failed or the answer is not JSON.
    pub fn query_answer(&self, promql: &str) -> anyhow::Result<Value> {
        self.api(&format!("/api/v1/query?query={}", encode(promql)))
    }

    /// Runs the instant query `promql` now and returns its vector: one
    /// `(labels, value)` per series. Blocking.
    ///
    /// # Errors
    /// The request failed, Prometheus refused the query, or the result is
    /// not an instant vector.
    pub fn query(&self, promql: &str) -> anyhow::Result<Vec<(Value, f64)>> {
        let answer = self.query_answer(promql)?;
        if answer["status"] != "success" {
            bail!("query {promql:?} failed: {answer}");
        }
        if answer["data"]["resultType"] != "vector" {
            bail!("query {promql:?} is not an instant vector: {answer}");
        }
        answer["data"]["result"]
            .as_array()
            .context("no result array")?
            .iter()
            .map(|series| {
                let value = series["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .with_context(|| format!("no value in {series}"))?;
                Ok((series["metric"].clone(), value))
            })
            .collect()
    }

    /// The value of a query expected to give at most one series (`sum(…)`);
    /// `None` when it gives none. Blocking.
    ///
    /// # Errors
    /// As [`Self::query`]; also when it gives several series.
    pub fn query_scalar(&self, promql: &str) -> anyhow::Result<Option<f64>> {
        let result = self.query(promql)?;
        match result.as_slice() {
            [] => Ok(None),
            [(_, value)] => Ok(Some(*value)),
            _ => bail!("query {promql:?} gave several series: {result:?}"),
        }
    }

    /// Prometheus's own log so far (warnings and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    fn spawn(
        binary: &Path,
        addr: SocketAddr,
        targets: &[SocketAddr],
        rule_files: &[PathBuf],
    ) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "mcp-testkit-prometheus-{}-{}",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let conf = dir.join("prometheus.yml");
        std::fs::write(&conf, config(targets, rule_files))
            .with_context(|| format!("writing {}", conf.display()))?;
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let spawned = Command::new(binary)
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(err).with_context(|| format!("spawning {}", binary.display()));
            }
        };
        // From here on, drop cleans up the process and the directory.
        let mut prometheus = Self { addr, child, dir };
        let mut waited = Duration::ZERO;
        loop {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                bail!("prometheus exited ({status}):\n{}", prometheus.log_tail());
            }
            if matches!(get(addr, "/-/ready"), Ok((200, _))) {
                return Ok(prometheus);
            }
            if waited >= READY_LIMIT {
                bail!(
                    "prometheus on {addr} not ready after {READY_LIMIT:?}:\n{}",
                    prometheus.log_tail()
                );
            }
            std::thread::sleep(PROBE_INTERVAL);
            waited += PROBE_INTERVAL;
        }
    }

    fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(LOG_LINES_QUOTED)..].join("\n")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `prometheus` from `PATH` (Debian: package `prometheus`, `/usr/bin`).
fn prometheus_binary() -> anyhow::Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("prometheus"))
        .find(|candidate| candidate.is_file());
    match on_path {
        Some(binary) => Ok(binary),
        None => bail!(
            "prometheus not found: install it (apt-get install prometheus) \
             or run tests/run-all.sh"
        ),
    }
}

/// The whole prometheus.yml: every target in one job, scraped and rules
/// evaluated every second, so that a test waits seconds, not minutes.
fn config(targets: &[SocketAddr], rule_files: &[PathBuf]) -> String {
    let targets = targets
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut rules = String::new();
    if !rule_files.is_empty() {
        rules.push_str("rule_files:\n");
        for file in rule_files {
            let _ = writeln!(rules, "  - \"{}\"", file.display());
        }
    }
    format!(
        r#"# Generated by mcp-cluster-testkit for one test.
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
{rules}
scrape_configs:
  - job_name: {PROMETHEUS_JOB}
    metrics_path: /metrics
    static_configs:
      - targets: [{targets}]
"#
    )
}

/// One HTTP/1.0 GET (the server closes the connection after the body, and
/// never answers in chunks); returns the status and the body.
fn get(addr: SocketAddr, path_and_query: &str) -> anyhow::Result<(u16, String)> {
    crate::raw_http(
        addr,
        &format!("GET {path_and_query} HTTP/1.0\r\nHost: {addr}"),
        "",
    )
}

/// Percent-encodes a query parameter's value (everything but RFC 3986's
/// unreserved characters).
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lists_every_target_and_rule_file_in_one_job() {
        let a = SocketAddr::from(([127, 0, 0, 1], 1001));
        let b = SocketAddr::from(([127, 0, 0, 1], 1002));
        let conf = config(&[a, b], &[PathBuf::from("/x/r.yml")]);
        assert!(conf.contains("targets: [\"127.0.0.1:1001\", \"127.0.0.1:1002\"]"));
        assert!(conf.contains("job_name: mcp-node"));
        assert!(conf.contains("scrape_interval: 1s"));
        assert!(conf.contains("rule_files:\n  - \"/x/r.yml\""));
        assert!(!config(&[a], &[]).contains("rule_files"));
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            encode(r#"sum(up{job="a b"}) > 0.5"#),
            "sum%28up%7Bjob%3D%22a%20b%22%7D%29%20%3E%200.5"
        );
        assert_eq!(encode("rate(x[1m])"), "rate%28x%5B1m%5D%29");
    }

    #[test]
    fn refuses_no_targets() {
        assert!(Prometheus::start(&[]).is_err());
    }

    /// Polls `query` until `done` holds for its result (at most
    /// [`READY_LIMIT`]).
    fn wait_for(
        prometheus: &Prometheus,
        query: &str,
        done: impl Fn(&[(Value, f64)]) -> bool,
    ) -> Vec<(Value, f64)> {
        let mut waited = Duration::ZERO;
        loop {
            let result = prometheus.query(query).unwrap();
            if done(&result) {
                return result;
            }
            assert!(
                waited < READY_LIMIT,
                "{query}: {result:?}\n{}",
                prometheus.log()
            );
            std::thread::sleep(PROBE_INTERVAL);
            waited += PROBE_INTERVAL;
        }
    }

    /// The smallest real round trip: a second Prometheus scrapes the first
    /// one's own `/metrics`, and the first one finds its target down.
    #[test]
    fn scrapes_targets_and_answers_queries() {
        // Port 9 (discard) is closed on loopback: the target is down.
        let first = Prometheus::start(&[SocketAddr::from(([127, 0, 0, 1], 9))]).unwrap();
        let second = Prometheus::start(&[first.addr()]).unwrap();

        let up = wait_for(&second, "up", |r| r.len() == 1 && r[0].1 == 1.0);
        assert_eq!(up[0].0["job"], PROMETHEUS_JOB);
        assert_eq!(up[0].0["instance"], first.addr().to_string());
        let down = wait_for(&first, "up", |r| !r.is_empty());
        assert_eq!(down[0].1, 0.0, "{down:?}");
        assert_eq!(
            second.query_scalar("count(prometheus_build_info)").unwrap(),
            Some(1.0)
        );

        let answer = second.query_answer("sum(").unwrap();
        assert_eq!(answer["status"], "error", "{answer}");
        assert_eq!(answer["errorType"], "bad_data", "{answer}");
        assert!(second.query("sum(").is_err());
    }
}
