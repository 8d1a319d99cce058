//! A whole cluster for one test: a [`RedisServer`], `n` `mcp-node`
//! processes sharing it (or `n` of a provider's own binary,
//! [`NodeCommand`]), and an [`Nginx`] round-robin load balancer in
//! front. Each node keeps its port across restarts, so the load balancer's
//! upstream list stays valid while a test kills, drains and restarts nodes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::{Nginx, NodeProcess, RedisCluster, RedisServer};

/// Environment variable naming the `mcp-node` binary to run.
pub const NODE_BIN_ENV: &str = "MCP_NODE_BIN";

/// The `mcp-node` binary: `$MCP_NODE_BIN` if set, else
/// `target/debug/mcp-node` in this workspace (build it first:
/// `cargo build -p mcp-node`).
pub fn node_binary() -> PathBuf {
    match std::env::var_os(NODE_BIN_ENV) {
        Some(path) => PathBuf::from(path),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/mcp-node"),
    }
}

/// [`node_binary`], or an error saying how to build it.
fn built_node_binary() -> anyhow::Result<PathBuf> {
    let binary = node_binary();
    if !binary.exists() {
        bail!(
            "{} not found: build it first (cargo build -p mcp-node) or set {NODE_BIN_ENV}",
            binary.display()
        );
    }
    Ok(binary)
}

/// The example program `name` of a workspace crate,
/// `target/debug/examples/<name>` (the test command builds every example
/// first: `cargo build --workspace --all-targets`).
///
/// # Panics
/// When it has not been built.
pub fn example_binary(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/debug/examples")
        .join(name);
    assert!(
        path.exists(),
        "{} not found: build it first (cargo build --workspace --examples)",
        path.display()
    );
    path
}

/// The binary `name` of a workspace crate, `target/debug/<name>` (a
/// `src/bin/<name>.rs`, as the programs of `examples/`; the test command
/// builds every binary first: `cargo build --workspace --all-targets`).
///
/// # Panics
/// When it has not been built.
pub fn program_binary(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/debug")
        .join(name);
    assert!(
        path.exists(),
        "{} not found: build it first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// What a [`Cluster`] runs as its nodes: `mcp-node` ([`node_binary`]) or
/// any program built on `mcp_cluster::cli::run`, which takes the same
/// flags; with variables added to its environment, and its log kept for
/// [`NodeProcess::log`] if asked.
#[derive(Debug, Clone)]
pub struct NodeCommand {
    binary: PathBuf,
    env: Vec<(String, String)>,
    keep_log: bool,
    /// ACL rules the nodes' Redis user gets beyond the node's own.
    redis_acl: Vec<String>,
}

impl NodeCommand {
    /// Runs `binary` as every node.
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        Self {
            binary: binary.into(),
            env: Vec::new(),
            keep_log: false,
            redis_acl: Vec::new(),
        }
    }

    /// Adds ACL rules to the nodes' Redis user, beyond the commands
    /// `proto-docs/redis-layout.md` lists for a node: what a provider's own
    /// code does with the node's Redis (`"~stateful:*", "+incrby"`, say).
    #[must_use]
    pub fn redis_acl(mut self, rules: &[&str]) -> Self {
        self.redis_acl
            .extend(rules.iter().map(|rule| (*rule).to_owned()));
        self
    }

    /// Adds `name=value` to every node's environment.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Keeps what every node logs (its stderr) for [`NodeProcess::log`]
    /// and [`NodeProcess::wait_for_log`]; each line is also written to this
    /// process's stderr.
    #[must_use]
    pub fn keep_log(mut self) -> Self {
        self.keep_log = true;
        self
    }

    /// Spawns one node on its fixed address.
    fn spawn(&self, args: &[String], addr: SocketAddr) -> anyhow::Result<NodeProcess> {
        let mut command = Command::new(&self.binary);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        NodeProcess::spawn_command(
            &self.binary,
            command,
            args,
            Some(&addr.to_string()),
            self.keep_log,
        )
    }
}

/// The `mcp-loadtest` binary: `target/debug/mcp-loadtest` in this
/// workspace.
///
/// # Panics
/// When it has not been built (`cargo build -p mcp-loadtest`).
pub fn loadtest_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/mcp-loadtest");
    assert!(
        path.exists(),
        "{} not found: build it first (cargo build -p mcp-loadtest)",
        path.display()
    );
    path
}

/// `loadtest/scenarios/<name>` of this repository, as an argument.
pub fn loadtest_scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../loadtest/scenarios")
        .join(name)
        .display()
        .to_string()
}

/// Runs an `mcp-loadtest` command (made from [`loadtest_binary`]) to its
/// end; its stderr is echoed into the test's output, which then shows why
/// a run failed.
///
/// # Panics
/// When it does not start.
pub fn loadtest_output(command: &mut Command) -> std::process::Output {
    let output = command.output().expect("running mcp-loadtest");
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    output
}

/// `mcp-loadtest ARGS` to its end (see [`loadtest_output`]).
pub fn loadtest(args: &[&str]) -> std::process::Output {
    loadtest_output(Command::new(loadtest_binary()).args(args))
}

/// `mcp-loadtest run` of a scenario of `loadtest/scenarios/` in the
/// background: by default `mixed.toml` (calls with progress,
/// cancellations, standalone streams, resumptions, session churn); killed
/// on drop.
#[derive(Debug)]
pub struct MixedLoad {
    child: std::process::Child,
    dir: PathBuf,
}

impl MixedLoad {
    /// Starts `sessions` sessions of `mixed.toml` against `url`, ramped up
    /// over 2 s, for `duration_secs`.
    ///
    /// # Panics
    /// When `mcp-loadtest` is not built or does not start.
    pub fn start(url: &str, sessions: u32, duration_secs: u32) -> Self {
        Self::start_scenario(url, "mixed.toml", sessions, duration_secs)
    }

    /// Starts `sessions` sessions of `loadtest/scenarios/<scenario>` (say
    /// `chaos.toml`) against `url`, ramped up over 2 s, for
    /// `duration_secs`.
    ///
    /// # Panics
    /// When `mcp-loadtest` is not built or does not start.
    pub fn start_scenario(url: &str, scenario: &str, sessions: u32, duration_secs: u32) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "mcp-mixed-load-{}-{}",
            std::process::id(),
            crate::free_port().unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the report");
        let scenario = loadtest_scenario(scenario);
        let child = Command::new(loadtest_binary())
            .args(["run", "--url", url, "--scenario"])
            .arg(&scenario)
            .args(["--sessions", &sessions.to_string(), "--ramp-up", "2"])
            .args(["--duration", &duration_secs.to_string(), "--report"])
            .arg(dir.join("report.json"))
            .spawn()
            .expect("running mcp-loadtest");
        Self { child, dir }
    }

    /// Waits for the run to end: its exit status and its JSON report.
    ///
    /// # Panics
    /// When the report cannot be read.
    pub fn finish(mut self) -> (std::process::ExitStatus, serde_json::Value) {
        let status = self.child.wait().expect("waiting for mcp-loadtest");
        let report = std::fs::read(self.dir.join("report.json")).expect("the load report");
        let report = serde_json::from_slice(&report).expect("a JSON report");
        (status, report)
    }
}

impl Drop for MixedLoad {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Redis, nodes and a load balancer; every process is killed on drop
/// (load balancer first, Redis last).
#[derive(Debug)]
pub struct Cluster {
    /// In front of every node's port, including nodes that are down.
    nginx: Nginx,
    /// Node `i`, `None` while it is down (after [`Self::kill_node`] or
    /// [`Self::terminate_node`]). Dropping one kills it.
    nodes: Vec<Option<NodeProcess>>,
    /// Node `i`'s fixed address, reused by [`Self::restart_node`].
    addrs: Vec<SocketAddr>,
    /// Node `i`'s arguments (`--redis-url`, the caller's extras), without
    /// `--bind`.
    args: Vec<Vec<String>>,
    command: NodeCommand,
    /// The Redis this cluster started; `None` when the caller runs its own
    /// ([`Self::start_on_redis`]) or on a Redis Cluster.
    redis: Option<RedisServer>,
    /// The Redis Cluster this cluster started, with [`REDIS_KIND_ENV`] set
    /// to `cluster`.
    redis_cluster: Option<RedisCluster>,
}

/// With this variable set to `cluster`, [`Cluster::start`] and its siblings
/// run the nodes on a Redis Cluster of three primaries with a replica each
/// ([`RedisCluster`]) instead of one `redis-server`: `tests/run-all.sh` runs
/// the cluster tests that do not reach into Redis themselves once more so.
pub const REDIS_KIND_ENV: &str = "MCP_TEST_REDIS";

impl Cluster {
    /// Starts Redis, `n` nodes of [`node_binary`] with
    /// `--redis-url <url> --log warn <extra_args>` (no `--log warn` when
    /// `extra_args` has a `--log`), each on its own free loopback port, and
    /// nginx in front of them.
    ///
    /// # Errors
    /// A binary is missing (the message says how to install or build it),
    /// or a process does not start.
    pub fn start(n: usize, extra_args: &[&str]) -> anyhow::Result<Self> {
        Self::start_with(n, |_| extra_args.iter().map(|a| (*a).to_owned()).collect())
    }

    /// As [`Self::start`], the load balancer first: `extra_args` gets its
    /// MCP endpoint URL (`http://127.0.0.1:<port>/mcp`), for settings that
    /// name the public URL (the resource URI of authorization).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_with(
        n: usize,
        extra_args: impl FnOnce(&str) -> Vec<String>,
    ) -> anyhow::Result<Self> {
        Self::start_command(n, NodeCommand::new(built_node_binary()?), extra_args)
    }

    /// As [`Self::start_with`], with `command` as every node: a provider's
    /// own binary (built on `mcp_cluster::cli::run`, so it takes
    /// `mcp-node`'s flags), its environment, its log kept.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_command(
        n: usize,
        command: NodeCommand,
        extra_args: impl FnOnce(&str) -> Vec<String>,
    ) -> anyhow::Result<Self> {
        // The nodes send only what proto-docs/redis-layout.md lists (and
        // what the command's own code was allowed).
        if std::env::var(REDIS_KIND_ENV).is_ok_and(|kind| kind == "cluster") {
            let redis = RedisCluster::start_with(3, 1, &command.redis_acl)?;
            let urls = vec![redis.node_url(); n];
            let mut cluster = Self::start_nodes(command, None, &urls, extra_args)?;
            cluster.redis_cluster = Some(redis);
            return Ok(cluster);
        }
        let redis = RedisServer::start_for_nodes_with(&command.redis_acl)?;
        let urls = vec![redis.node_url(); n];
        Self::start_nodes(command, Some(redis), &urls, extra_args)
    }

    /// As [`Self::start`], on a Redis the caller runs: `redis_url` is every
    /// node's `--redis-url` (a `redis+sentinel://` URL, say). [`Self::redis`]
    /// is then not available.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_on_redis(n: usize, redis_url: &str, extra_args: &[&str]) -> anyhow::Result<Self> {
        Self::start_on_redis_per_node(&vec![redis_url.to_owned(); n], extra_args)
    }

    /// As [`Self::start_on_redis`], node `i` on `redis_urls[i]`: one node
    /// reaching Redis through a [`crate::TcpProxy`] that can partition it,
    /// say.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_on_redis_per_node(
        redis_urls: &[String],
        extra_args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_nodes(
            NodeCommand::new(built_node_binary()?),
            None,
            redis_urls,
            |_| extra_args.iter().map(|a| (*a).to_owned()).collect(),
        )
    }

    /// Node `i` on `redis_urls[i]`, as many nodes as URLs.
    fn start_nodes(
        command: NodeCommand,
        redis: Option<RedisServer>,
        redis_urls: &[String],
        extra_args: impl FnOnce(&str) -> Vec<String>,
    ) -> anyhow::Result<Self> {
        let n = redis_urls.len();
        if n == 0 {
            bail!("a cluster needs at least one node");
        }
        if !command.binary.exists() {
            bail!("{} not found: build it first", command.binary.display());
        }
        let addrs = (0..n)
            .map(|_| Ok(SocketAddr::from(([127, 0, 0, 1], crate::free_port()?))))
            .collect::<anyhow::Result<Vec<_>>>()?;
        // nginx needs no upstream up to start.
        let nginx = Nginx::start(&addrs)?;
        let extra_args = extra_args(&nginx.url());
        let args: Vec<Vec<String>> = redis_urls
            .iter()
            .map(|url| {
                let mut args = vec!["--redis-url".to_owned(), url.clone()];
                if !extra_args.iter().any(|arg| arg.starts_with("--log")) {
                    args.extend(["--log".to_owned(), "warn".to_owned()]);
                }
                args.extend(extra_args.iter().cloned());
                args
            })
            .collect();
        let mut nodes = Vec::with_capacity(n);
        for (i, addr) in addrs.iter().enumerate() {
            let node = command
                .spawn(&args[i], *addr)
                .with_context(|| format!("node {i}"))?;
            nodes.push(Some(node));
        }
        Ok(Self {
            nginx,
            nodes,
            addrs,
            args,
            command,
            redis,
            redis_cluster: None,
        })
    }

    /// The shared Redis (stop and restart it for outage tests).
    ///
    /// # Panics
    /// For a cluster on the caller's Redis ([`Self::start_on_redis`]).
    pub fn redis(&self) -> &RedisServer {
        self.redis
            .as_ref()
            .expect("this cluster runs on the caller's Redis")
    }

    /// The load balancer.
    pub fn nginx(&self) -> &Nginx {
        &self.nginx
    }

    /// The nodes by index, `None` for a node that is down.
    pub fn nodes(&self) -> &[Option<NodeProcess>] {
        &self.nodes
    }

    /// Node `i`, `None` while it is down.
    ///
    /// # Panics
    /// When `i` is out of range.
    pub fn node(&self, i: usize) -> Option<&NodeProcess> {
        self.nodes[i].as_ref()
    }

    /// How many nodes the cluster has (up or down).
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Always false: a cluster has at least one node.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Node `i`'s address, the same across restarts.
    ///
    /// # Panics
    /// When `i` is out of range.
    pub fn node_addr(&self, i: usize) -> SocketAddr {
        self.addrs[i]
    }

    /// Node `i`'s MCP endpoint, bypassing the load balancer; the same
    /// across restarts.
    ///
    /// # Panics
    /// When `i` is out of range.
    pub fn node_url(&self, i: usize) -> String {
        match &self.nodes[i] {
            Some(node) => node.url().to_owned(),
            None => format!("http://{}/mcp", self.addrs[i]),
        }
    }

    /// The MCP endpoint through the load balancer.
    pub fn lb_url(&self) -> String {
        self.nginx.url()
    }

    /// The nodes that should run (not taken down by this cluster) but
    /// exited on their own.
    pub fn exited(&mut self) -> Vec<usize> {
        self.nodes
            .iter_mut()
            .enumerate()
            .filter_map(|(i, node)| node.as_mut().is_some_and(|n| !n.is_running()).then_some(i))
            .collect()
    }

    /// Kills node `i` with SIGKILL (a crash: no drain, nothing flushed).
    /// Does nothing if it is down.
    ///
    /// # Panics
    /// When `i` is out of range.
    pub fn kill_node(&mut self, i: usize) {
        // NodeProcess's drop is SIGKILL + wait.
        drop(self.nodes[i].take());
    }

    /// Sends node `i` SIGTERM and waits for it to drain and exit. `None`
    /// if it was down.
    ///
    /// # Errors
    /// The signal could not be sent or the wait failed.
    ///
    /// # Panics
    /// When `i` is out of range.
    pub fn terminate_node(&mut self, i: usize) -> anyhow::Result<Option<std::process::ExitStatus>> {
        match self.nodes[i].take() {
            Some(mut node) => Ok(Some(node.terminate()?)),
            None => Ok(None),
        }
    }

    /// Starts node `i` again, on its old port with its old arguments; kills
    /// it first (SIGKILL) if it runs.
    ///
    /// # Errors
    /// The node does not start (or something else took its port).
    ///
    /// # Panics
    /// When `i` is out of range.
    pub fn restart_node(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill_node(i);
        let node = self
            .command
            .spawn(&self.args[i], self.addrs[i])
            .with_context(|| format!("restarting node {i}"))?;
        self.nodes[i] = Some(node);
        Ok(())
    }
}
