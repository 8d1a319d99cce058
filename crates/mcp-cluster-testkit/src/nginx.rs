//! A real `nginx` as the cluster's load balancer for one test: plain round
//! robin over the given nodes, no stickiness, nothing buffered, so SSE
//! streams pass through as the nodes write them. Everything nginx writes
//! (config, pid, logs, temp files) lives in a directory of its own that is
//! removed on drop.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::GUARD;

/// Startup attempts when the chosen port is taken between picking it and
/// nginx binding it.
const START_ATTEMPTS: usize = 3;
/// Pause between readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// Where Debian installs nginx; not on a non-root user's `PATH`.
const SBIN_NGINX: &str = "/usr/sbin/nginx";

/// Distinguishes the directories of several instances in one process.
static INSTANCE: AtomicUsize = AtomicUsize::new(0);

/// An `nginx` child process balancing `127.0.0.1:<port>` over upstream
/// nodes; killed on drop, its directory removed.
#[derive(Debug)]
pub struct Nginx {
    addr: SocketAddr,
    /// The single nginx process (`master_process off`, so killing it
    /// leaves no worker behind). Killed and reaped on drop.
    child: Child,
    /// Config, pid file, logs and temp files; removed on drop after the
    /// process is gone.
    dir: PathBuf,
}

impl Nginx {
    /// Starts nginx on a free loopback port in front of `upstreams` and
    /// waits until the port accepts connections.
    ///
    /// # Errors
    /// `nginx` is not installed, rejects the config, exits, or does not
    /// accept within [`GUARD`].
    pub fn start(upstreams: &[SocketAddr]) -> anyhow::Result<Self> {
        Self::start_with(upstreams, "")
    }

    /// As [`Self::start`], with nginx appending each client's address to
    /// its `X-Forwarded-For` (`proxy_set_header X-Forwarded-For
    /// $proxy_add_x_forwarded_for`), as a proxy in front of nodes that
    /// trust it must.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_forwarding_for(upstreams: &[SocketAddr]) -> anyhow::Result<Self> {
        Self::start_with(
            upstreams,
            "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        )
    }

    fn start_with(upstreams: &[SocketAddr], directives: &str) -> anyhow::Result<Self> {
        if upstreams.is_empty() {
            bail!("nginx needs at least one upstream");
        }
        let binary = nginx_binary()?;
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            let addr = SocketAddr::from(([127, 0, 0, 1], crate::free_port()?));
            match Self::spawn(&binary, addr, upstreams, directives) {
                Ok(nginx) => return Ok(nginx),
                Err(err) => last_err = Some(err),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("nginx did not start")))
    }

    /// The MCP endpoint through the load balancer,
    /// `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The access log so far, one line per request with the upstream that
    /// served it (`upstream=127.0.0.1:PORT`), for failure messages.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default()
    }

    /// The error log so far (why an upstream failed).
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }

    fn spawn(
        binary: &Path,
        addr: SocketAddr,
        upstreams: &[SocketAddr],
        directives: &str,
    ) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "mcp-testkit-nginx-{}-{}",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(&dir, addr, upstreams, directives))
            .with_context(|| format!("writing {}", conf.display()))?;
        let output = std::fs::File::create(dir.join("output.log"))?;
        let spawned = Command::new(binary)
            // `-e`: the error log before the config is read (nginx >= 1.19.5),
            // else nginx tries the compiled-in path under /var/log.
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(err).with_context(|| format!("spawning {}", binary.display()));
            }
        };
        // From here on, drop cleans up the process and the directory.
        let mut nginx = Self { addr, child, dir };
        let mut waited = Duration::ZERO;
        loop {
            if let Ok(Some(status)) = nginx.child.try_wait() {
                bail!("nginx exited ({status}):\n{}", nginx.logs());
            }
            if TcpStream::connect(addr).is_ok() {
                return Ok(nginx);
            }
            if waited >= GUARD {
                bail!("nginx did not accept on {addr}:\n{}", nginx.logs());
            }
            std::thread::sleep(PROBE_INTERVAL);
            waited += PROBE_INTERVAL;
        }
    }

    fn logs(&self) -> String {
        ["output.log", "error.log"]
            .iter()
            .filter_map(|name| std::fs::read_to_string(self.dir.join(name)).ok())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `nginx` from `PATH`, else Debian's `/usr/sbin/nginx`.
fn nginx_binary() -> anyhow::Result<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file());
    match on_path.or_else(|| Some(PathBuf::from(SBIN_NGINX)).filter(|p| p.is_file())) {
        Some(binary) => Ok(binary),
        None => bail!(
            "nginx not found: install it (apt-get install nginx-light or nginx) \
             or run tests/run-all.sh"
        ),
    }
}

/// The whole nginx.conf: one process, every path inside `dir`, one
/// round-robin upstream without stickiness; the proxy settings are the
/// README's, then `directives` (more of the `location`'s).
fn config(dir: &Path, listen: SocketAddr, upstreams: &[SocketAddr], directives: &str) -> String {
    let dir = dir.display();
    let mut servers = String::new();
    for upstream in upstreams {
        // max_fails=0: never mark a node down (a restarted node is used at
        // once); a refused connect still moves on to the next node.
        let _ = writeln!(servers, "        server {upstream} max_fails=0;");
    }
    format!(
        r#"# Generated by mcp-cluster-testkit for one test.
daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;

events {{
    worker_connections 1024;
}}

http {{
    log_format upstream '$remote_addr "$request" $status upstream=$upstream_addr';
    access_log {dir}/access.log upstream;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;

    upstream mcp {{
{servers}        # Connections to the nodes are reused, and closed by nginx before
        # a node's own keep-alive timeout (5 s) would close them under a
        # request being sent.
        keepalive 64;
        keepalive_timeout 4s;
    }}

    server {{
        listen {listen};
        # The nodes enforce their own body limit (nginx's default is 1m).
        client_max_body_size 0;

        location / {{
            proxy_pass http://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
            proxy_connect_timeout 5s;
            proxy_next_upstream error timeout;
            {directives}
        }}
    }}
}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lists_every_upstream_without_stickiness() {
        let a = SocketAddr::from(([127, 0, 0, 1], 1001));
        let b = SocketAddr::from(([127, 0, 0, 1], 1002));
        let conf = config(
            Path::new("/tmp/x"),
            SocketAddr::from(([127, 0, 0, 1], 9)),
            &[a, b],
            "",
        );
        assert!(conf.contains("server 127.0.0.1:1001 max_fails=0;"));
        assert!(conf.contains("server 127.0.0.1:1002 max_fails=0;"));
        assert!(conf.contains("listen 127.0.0.1:9;"));
        assert!(
            conf.contains("keepalive_timeout 4s;"),
            "below the nodes' keep-alive"
        );
        for sticky in ["ip_hash", "hash ", "sticky", "least_conn"] {
            assert!(!conf.contains(sticky), "{sticky}");
        }
    }

    #[test]
    fn refuses_no_upstreams() {
        assert!(Nginx::start(&[]).is_err());
    }
}
