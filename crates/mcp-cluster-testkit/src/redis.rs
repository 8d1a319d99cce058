//! A real `redis-server` for one test: on a free loopback port, without a
//! config file and without touching the disk (no RDB, no AOF). Talks to it
//! over raw RESP on a `TcpStream` (or a TLS stream over one) so the testkit
//! needs no Redis client; the Redis adapters under test bring their own.
//!
//! [`RedisServer::start_tls`] starts one that speaks TLS only (`--port 0`,
//! `--tls-port`), wants a client certificate signed by the test CA
//! (`--tls-auth-clients yes`) and, when asked, an ACL user with a password
//! instead of the open `default` user.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::{GUARD, TestPki};

/// Startup attempts when the chosen port is taken between picking it and
/// the server binding it.
const START_ATTEMPTS: usize = 3;
/// Pause between readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// Lines of the server's own log kept for error messages.
const LOG_LINES_KEPT: usize = 40;

/// A `redis-server` child process on `127.0.0.1:<port>`; killed on drop.
///
/// Every method takes `&self` (the child sits behind a mutex), so a test can
/// stop and restart Redis while other tasks hold the same reference.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// How the server is set up and reached: plain, or TLS with its files;
    /// with an ACL user or the open `default` one.
    access: Access,
    /// The running server, `None` between [`Self::stop`] and
    /// [`Self::restart`]. Written by `start`/`stop`/`restart`/`drop`.
    child: Mutex<Option<Child>>,
    /// The last lines the server printed (its log goes to stdout); filled
    /// by a reader thread per process, read for error messages.
    log: Arc<Mutex<Vec<String>>>,
}

impl RedisServer {
    /// Starts `redis-server` on a free loopback port and waits until it
    /// answers.
    ///
    /// # Errors
    /// `redis-server` is not on `PATH`, exits, or does not answer within
    /// [`GUARD`].
    pub fn start() -> anyhow::Result<Self> {
        Self::start_free(Access::default())
    }

    /// Starts a server set up by `access` on a free port, trying another
    /// when the one picked was taken before the server bound it.
    fn start_free(access: Access) -> anyhow::Result<Self> {
        let mut last_err = None;
        for _ in 0..START_ATTEMPTS {
            match Self::start_with(crate::free_port()?, access.clone()) {
                Ok(server) => return Ok(server),
                Err(err) => last_err = Some(err),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("redis-server did not start")))
    }

    /// Starts `redis-server` on a free loopback port whose nodes log in as
    /// [`NODE_ACL_USER`], allowed exactly what `proto-docs/redis-layout.md`
    /// lists ([`node_acl_rules`]): [`Self::node_url`] carries its
    /// credentials; the probes log in as an admin user.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_for_nodes() -> anyhow::Result<Self> {
        Self::start_for_nodes_with(&[])
    }

    /// As [`Self::start_for_nodes`], the user also getting `extra` ACL rules
    /// (a provider's own keys and commands).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_for_nodes_with(extra: &[String]) -> anyhow::Result<Self> {
        let access = Access {
            user: Some((NODE_ACL_USER.to_owned(), "node-secret".to_owned())),
            restricted: true,
            extra_rules: extra.to_vec(),
            ..Access::default()
        };
        Self::start_free(access)
    }

    /// The URL a node uses: [`Self::url`] with the ACL user's credentials,
    /// when the server has one.
    pub fn node_url(&self) -> String {
        match &self.access.user {
            Some((user, password)) => self.url_as(user, password),
            None => self.url(),
        }
    }

    /// Starts `redis-server` on loopback port `port` (one a test chose
    /// before, e.g. for a node already told to connect there) and waits
    /// until it answers.
    ///
    /// # Errors
    /// As [`Self::start`]; also when something else holds the port.
    pub fn start_on(port: u16) -> anyhow::Result<Self> {
        Self::start_with(port, Access::default())
    }

    /// Starts `redis-server` speaking TLS only, on a free loopback port,
    /// with `pki`'s server certificate, wanting a client certificate signed
    /// by `pki`'s CA. With `user` (name, password), the `default` user is
    /// off and that ACL user, allowed exactly what
    /// `proto-docs/redis-layout.md` lists for a node ([`node_acl_rules`]),
    /// is the nodes' way in (the probes log in as an admin user). `pki` must outlive the server ([`Self::restart`] reads its
    /// files again).
    ///
    /// # Errors
    /// As [`Self::start`]; also when `pki`'s files cannot be read.
    pub fn start_tls(pki: &TestPki, user: Option<(&str, &str)>) -> anyhow::Result<Self> {
        let access = Access {
            tls: Some(TlsSetup::new(pki)?),
            restricted: user.is_some(),
            user: user.map(|(name, password)| (name.to_owned(), password.to_owned())),
            ..Access::default()
        };
        Self::start_free(access)
    }

    /// Starts `redis-server` on a free loopback port as a replica of
    /// `primary` (plain TCP, open `default` user), and waits until it
    /// answers (not until it has synchronized: see
    /// [`Self::wait_replicated`]).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_replica_of(primary: &Self) -> anyhow::Result<Self> {
        let access = Access {
            replica_of: Some(primary.port),
            ..Access::default()
        };
        Self::start_free(access)
    }

    /// Waits until this primary has `replicas` replicas online that have
    /// processed everything written to it so far: their acknowledged
    /// offsets reach its replication offset as it was at the call. (`WAIT`
    /// would not do: it waits for the writes of its own connection only.)
    ///
    /// # Errors
    /// They are not there within [`GUARD`].
    pub fn wait_replicated(&self, replicas: usize) -> anyhow::Result<()> {
        let field = |info: &str, name: &str| -> Option<u64> {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
        };
        let info = self.command(&["INFO", "replication"])?;
        let target = field(&info, "master_repl_offset:").context("no master_repl_offset")?;
        let mut waited = Duration::ZERO;
        loop {
            let info = self.command(&["INFO", "replication"])?;
            let caught_up = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("state=online"))
                .filter(|l| {
                    l.split(',')
                        .find_map(|kv| kv.strip_prefix("offset="))
                        .and_then(|v| v.parse::<u64>().ok())
                        .is_some_and(|offset| offset >= target)
                })
                .count();
            if caught_up >= replicas {
                return Ok(());
            }
            if waited >= GUARD {
                bail!(
                    "{caught_up} of {replicas} replicas reached offset {target} on port {}:\n{info}",
                    self.port
                );
            }
            std::thread::sleep(PROBE_INTERVAL);
            waited += PROBE_INTERVAL;
        }
    }

    fn start_with(port: u16, access: Access) -> anyhow::Result<Self> {
        let server = Self {
            port,
            access,
            child: Mutex::new(None),
            log: Arc::new(Mutex::new(Vec::new())),
        };
        server.spawn()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:<port>/`, or `rediss://…` for a TLS server;
    /// without credentials.
    pub fn url(&self) -> String {
        let scheme = if self.access.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// [`Self::url`] with `user` and `password` in it
    /// (`rediss://user:password@127.0.0.1:<port>/`).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        self.url()
            .replacen("://", &format!("://{user}:{password}@"), 1)
    }

    /// The port, the same across [`Self::restart`].
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Kills the server (SIGKILL): a crash, nothing flushed, nothing
    /// handed to replicas. A killed server stays down.
    pub fn kill(&self) {
        if let Some(mut child) = self.lock_child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): it holds its connections and answers
    /// nothing, as a server that hangs, until [`Self::resume`].
    ///
    /// # Errors
    /// The server is not running, or `kill` failed.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.signal("-STOP")
    }

    /// Lets a paused server go on (SIGCONT).
    ///
    /// # Errors
    /// As [`Self::pause`].
    pub fn resume(&self) -> anyhow::Result<()> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self
            .lock_child()
            .as_ref()
            .map(Child::id)
            .context("redis-server is not running")?;
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill {signal} {pid}: {status}");
        }
        Ok(())
    }

    /// Whether the server process is alive.
    pub fn is_running(&self) -> bool {
        match self.lock_child().as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server without SIGKILL: `SHUTDOWN NOSAVE`, falling back to
    /// SIGTERM, then waits for it to exit. Clients see their connections
    /// close. A stopped server stays stopped.
    ///
    /// # Errors
    /// The server did not exit within [`GUARD`] (it is then killed).
    pub fn stop(&self) -> anyhow::Result<()> {
        let Some(mut child) = self.lock_child().take() else {
            return Ok(());
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return Ok(());
        }
        // SHUTDOWN closes the connection instead of answering when it works.
        if command(&self.access, self.port, &["SHUTDOWN", "NOSAVE"]).is_err()
            || !exits(&mut child, GUARD / 2)
        {
            signal_term(child.id());
        }
        if !exits(&mut child, GUARD) {
            let _ = child.kill();
            let _ = child.wait();
            bail!("redis-server on port {} did not stop; killed", self.port);
        }
        Ok(())
    }

    /// Starts the server again on the same port (after [`Self::stop`], for
    /// outage tests); stops it first if it runs. The data is gone: nothing
    /// is persisted.
    ///
    /// # Errors
    /// As [`Self::stop`] and [`Self::start`]; also when something else took
    /// the port meanwhile.
    pub fn restart(&self) -> anyhow::Result<()> {
        self.stop()?;
        self.spawn()
    }

    /// Connected clients, not counting connections whose last command was
    /// `CLIENT LIST`: the one that asks, and earlier askers the server may
    /// not have seen close yet (each call uses a connection of its own).
    ///
    /// # Errors
    /// The server does not answer or the answer is not a `CLIENT LIST`.
    pub fn client_count(&self) -> anyhow::Result<usize> {
        let list = match command(&self.access, self.port, &["CLIENT", "LIST"])? {
            Reply::Bulk(Some(list)) => list,
            other => bail!("unexpected CLIENT LIST reply: {other:?}"),
        };
        Ok(list
            .lines()
            .filter(|line| !line.trim().is_empty())
            .filter(|line| {
                !line
                    .split_whitespace()
                    .any(|field| field == "cmd=client|list" || field == "cmd=client")
            })
            .count())
    }

    /// Runs one command and returns its reply (simple strings, errors and
    /// integers as text, bulk strings as their content, arrays unsupported).
    ///
    /// # Errors
    /// The server does not answer, or answers with an error.
    pub fn command(&self, args: &[&str]) -> anyhow::Result<String> {
        match command(&self.access, self.port, args)? {
            Reply::Simple(text) => Ok(text),
            Reply::Integer(n) => Ok(n.to_string()),
            Reply::Bulk(body) => Ok(body.unwrap_or_default()),
            Reply::Error(err) => bail!("redis error: {err}"),
        }
    }

    /// Spawns the process on `self.port` and waits until it answers.
    fn spawn(&self) -> anyhow::Result<()> {
        let port = self.port.to_string();
        let mut command = Command::new("redis-server");
        match &self.access.tls {
            None => command.args(["--port", &port]),
            Some(tls) => command
                .args(["--port", "0", "--tls-port", &port])
                .arg("--tls-cert-file")
                .arg(&tls.cert_file)
                .arg("--tls-key-file")
                .arg(&tls.key_file)
                .arg("--tls-ca-cert-file")
                .arg(&tls.ca_file)
                .args(["--tls-auth-clients", "yes"]),
        };
        if let Some((name, password)) = &self.access.user {
            command.args(["--user", "default", "off"]).args([
                "--user",
                name,
                "on",
                &format!(">{password}"),
            ]);
            if self.access.restricted {
                command
                    .args(node_acl_rules())
                    .args(&self.access.extra_rules)
                    .args(["--user", ADMIN_USER, "on", &format!(">{ADMIN_PASSWORD}")])
                    .args(["~*", "&*", "+@all"]);
            } else {
                command.args(["~*", "&*", "+@all"]);
            }
        }
        if let Some(primary) = self.access.replica_of {
            command.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        if let Some(dir) = &self.access.cluster_dir {
            if let Some(tls) = &self.access.tls {
                // The cluster bus and replication speak TLS too, each
                // member presenting the client certificate.
                command
                    .args(["--tls-cluster", "yes", "--tls-replication", "yes"])
                    .arg("--tls-client-cert-file")
                    .arg(&tls.client_cert_file)
                    .arg("--tls-client-key-file")
                    .arg(&tls.client_key_file);
            }
            if self.access.restricted {
                // Replicas replicate as the admin (`default` is off).
                command.args(["--masteruser", ADMIN_USER, "--masterauth", ADMIN_PASSWORD]);
            }
            command
                .args(["--cluster-enabled", "yes"])
                // The bus on a port of its own: the default (port + 10000)
                // may be past 65535 or taken.
                .args(["--cluster-port", &self.access.cluster_port.to_string()])
                .arg("--dir")
                .arg(dir)
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                // A primary not heard from for 2 s fails over to its replica.
                .args(["--cluster-node-timeout", "2000"]);
        }
        let mut child = command
            // `--save ""` and `--appendonly no`: nothing goes to disk.
            .args(["--bind", "127.0.0.1", "--save", ""])
            // A file no one wrote: a `dump.rdb` left in the working
            // directory is not loaded into the test's server.
            .args(["--dbfilename", &format!("mcp-test-{port}-none.rdb")])
            // Replication in memory both ways: no RDB file either.
            .args([
                "--repl-diskless-sync",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
            ])
            .args(["--repl-diskless-load", "on-empty-db"])
            .args(["--appendonly", "no", "--protected-mode", "yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|err| match err.kind() {
                std::io::ErrorKind::NotFound => anyhow::anyhow!(
                    "redis-server not found: install it (apt-get install redis-server) \
                     or run tests/run-all.sh"
                ),
                _ => anyhow::Error::new(err).context("spawning redis-server"),
            })?;
        for pipe in [
            child
                .stdout
                .take()
                .map(|out| Box::new(out) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|err| Box::new(err) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let log = Arc::clone(&self.log);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                    if log.len() == LOG_LINES_KEPT {
                        log.remove(0);
                    }
                    log.push(line);
                }
            });
        }
        let mut waited = Duration::ZERO;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                // Give the reader threads a moment to collect the reason.
                std::thread::sleep(PROBE_INTERVAL);
                bail!(
                    "redis-server on port {port} exited ({status}):\n{}",
                    self.log_tail()
                );
            }
            // The server that answers must be this child, not another one
            // already on the port (this one then exits: port taken).
            if answering_pid(&self.access, self.port) == Some(child.id()) {
                break;
            }
            if waited >= GUARD {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "redis-server on port {port} did not answer:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(PROBE_INTERVAL);
            waited += PROBE_INTERVAL;
        }
        *self.lock_child() = Some(child);
        Ok(())
    }

    fn lock_child(&self) -> MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log_tail(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join("\n")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.lock_child().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One RESP reply, as far as the testkit needs it.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Option<String>),
}

/// How a server is set up and reached.
#[derive(Debug, Clone, Default)]
struct Access {
    /// TLS only, with these files; `None`: plain TCP.
    tls: Option<TlsSetup>,
    /// The ACL user (name, password) the nodes log in as, which replaces
    /// the `default` one. With `restricted`, it may send exactly the
    /// commands `proto-docs/redis-layout.md` lists, and the probes log in as
    /// [`ADMIN_USER`]; without, it may send anything and the probes use it.
    user: Option<(String, String)>,
    restricted: bool,
    /// Rules the restricted user gets beyond the node's.
    extra_rules: Vec<String>,
    /// The primary's port, for a replica (`--replicaof`).
    replica_of: Option<u16>,
    /// A Redis Cluster member (`--cluster-enabled yes`), keeping its
    /// cluster state file in this directory (removed by [`RedisCluster`]).
    cluster_dir: Option<PathBuf>,
    /// A Redis Cluster member's bus port.
    cluster_port: u16,
}

/// The user the probes of a server with a restricted node user log in as.
const ADMIN_USER: &str = "testkit-admin";
/// Its password.
const ADMIN_PASSWORD: &str = "testkit-admin-secret";

/// The node user's name in `proto-docs/redis-layout.md`'s ACL line.
pub const NODE_ACL_USER: &str = "mcp-node";

/// The rules of the ACL line in `proto-docs/redis-layout.md` ("The commands
/// a node sends"), after its user name, `on` and password: what a node's
/// Redis user may do, read from the document so the two cannot drift.
///
/// # Panics
/// When the document has no such line.
pub fn node_acl_rules() -> Vec<String> {
    const DOC: &str = include_str!("../../../proto-docs/redis-layout.md");
    let prefix = format!("ACL SETUSER {NODE_ACL_USER} on >CHANGE-ME ");
    let line = DOC
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .expect("proto-docs/redis-layout.md lists the node's ACL rules");
    line.split_whitespace().map(str::to_owned).collect()
}

/// A TLS server's files, and the probes' side of its handshakes.
#[derive(Debug, Clone)]
struct TlsSetup {
    cert_file: PathBuf,
    key_file: PathBuf,
    ca_file: PathBuf,
    /// The test client certificate and key: what a Redis Cluster member
    /// presents to the others (`tls-auth-clients yes` everywhere).
    client_cert_file: PathBuf,
    client_key_file: PathBuf,
    /// Trusts the test CA and presents the test client certificate.
    client: Arc<rustls::ClientConfig>,
}

impl TlsSetup {
    fn new(pki: &TestPki) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(pki.ca_cert())? {
            roots.add(cert?)?;
        }
        let chain =
            CertificateDer::pem_file_iter(pki.client_cert())?.collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(pki.client_key())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .context("the test client certificate")?;
        Ok(Self {
            cert_file: pki.server_cert(),
            key_file: pki.server_key(),
            ca_file: pki.ca_cert(),
            client_cert_file: pki.client_cert(),
            client_key_file: pki.client_key(),
            client: Arc::new(client),
        })
    }
}

/// A probe's connection: plain or TLS.
trait Stream: Read + Write {}

impl<T: Read + Write> Stream for T {}

/// Sends `args` as a RESP array on a fresh connection (after `AUTH` when
/// the server has an ACL user) and reads one reply.
fn command(access: &Access, port: u16, args: &[&str]) -> anyhow::Result<Reply> {
    let socket = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], port)))?;
    socket.set_read_timeout(Some(GUARD))?;
    socket.set_write_timeout(Some(GUARD))?;
    let mut stream: Box<dyn Stream> = match &access.tls {
        None => Box::new(socket),
        Some(tls) => {
            let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
            let connection = rustls::ClientConnection::new(Arc::clone(&tls.client), name)?;
            Box::new(rustls::StreamOwned::new(connection, socket))
        }
    };
    let mut request = String::new();
    if let Some((name, password)) = &access.user {
        let (name, password) = if access.restricted {
            (ADMIN_USER, ADMIN_PASSWORD)
        } else {
            (name.as_str(), password.as_str())
        };
        request.push_str(&resp_array(&["AUTH", name, password]));
    }
    request.push_str(&resp_array(args));
    stream.write_all(request.as_bytes())?;
    stream.flush()?;
    let mut reader = BufReader::new(stream);
    if access.user.is_some() {
        match read_reply(&mut reader)? {
            Reply::Simple(ok) if ok == "OK" => {}
            other => bail!("AUTH refused: {other:?}"),
        }
    }
    read_reply(&mut reader)
}

/// `args` as a RESP array.
fn resp_array(args: &[&str]) -> String {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    request
}

/// Reads one reply.
fn read_reply(reader: &mut impl BufRead) -> anyhow::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        bail!("connection closed without a reply");
    }
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at_checked(1).context("empty reply")?;
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(rest.parse().context("bad integer reply")?),
        "$" => {
            let len: i64 = rest.parse().context("bad bulk length")?;
            let Ok(len) = usize::try_from(len) else {
                return Ok(Reply::Bulk(None));
            };
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len);
            Reply::Bulk(Some(
                String::from_utf8(body).context("bulk reply not UTF-8")?,
            ))
        }
        _ => bail!("unsupported reply: {line}"),
    })
}

/// The process id of the Redis answering on `port` (`INFO server`).
fn answering_pid(access: &Access, port: u16) -> Option<u32> {
    let Ok(Reply::Bulk(Some(info))) = command(access, port, &["INFO", "server"]) else {
        return None;
    };
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

/// Whether `child` exits within `limit`.
fn exits(child: &mut Child, limit: Duration) -> bool {
    let mut waited = Duration::ZERO;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if waited >= limit => return false,
            Ok(None) => {
                std::thread::sleep(PROBE_INTERVAL);
                waited += PROBE_INTERVAL;
            }
        }
    }
}

/// Sends SIGTERM via `kill` (the workspace forbids `unsafe`, so no libc).
fn signal_term(pid: u32) -> bool {
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}

/// A Redis Cluster of real `redis-server --cluster-enabled yes` members on
/// free loopback ports: `primaries` primaries, each with `replicas`
/// replicas, made one cluster by `redis-cli --cluster create`. Nodes log in
/// as [`NODE_ACL_USER`], allowed exactly what `proto-docs/redis-layout.md`
/// lists; the probes and `redis-cli` as an admin user. Killed on drop, its
/// directory removed.
#[derive(Debug)]
pub struct RedisCluster {
    members: Vec<RedisServer>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts the members, creates the cluster and waits until every member
    /// says it is ok and every replica follows its primary.
    ///
    /// # Errors
    /// A member does not start, `redis-cli --cluster create` fails, or the
    /// cluster is not ok within [`GUARD`].
    pub fn start(primaries: usize, replicas: usize) -> anyhow::Result<Self> {
        Self::start_with(primaries, replicas, &[])
    }

    /// As [`Self::start`], the node user also getting `extra` ACL rules (a
    /// provider's own keys and commands).
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_with(primaries: usize, replicas: usize, extra: &[String]) -> anyhow::Result<Self> {
        Self::start_as(primaries, replicas, extra, None)
    }

    /// As [`Self::start`], every member speaking TLS only (clients, the
    /// cluster bus and replication) with `pki`'s server certificate and
    /// wanting a client certificate signed by its CA; [`Self::node_url`] is
    /// then a `rediss+cluster://` URL. `pki` must outlive the cluster.
    ///
    /// # Errors
    /// As [`Self::start`]; also when `pki`'s files cannot be read.
    pub fn start_tls(pki: &TestPki, primaries: usize, replicas: usize) -> anyhow::Result<Self> {
        Self::start_as(primaries, replicas, &[], Some(TlsSetup::new(pki)?))
    }

    fn start_as(
        primaries: usize,
        replicas: usize,
        extra: &[String],
        tls: Option<TlsSetup>,
    ) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "mcp-redis-cluster-{}-{}",
            std::process::id(),
            crate::free_port()?
        ));
        std::fs::create_dir_all(&dir).context("redis cluster directory")?;
        let access = Access {
            user: Some((NODE_ACL_USER.to_owned(), "node-secret".to_owned())),
            restricted: true,
            extra_rules: extra.to_vec(),
            tls: tls.clone(),
            cluster_dir: Some(dir.clone()),
            ..Access::default()
        };
        let mut cluster = Self {
            members: Vec::new(),
            dir,
        };
        for _ in 0..primaries * (1 + replicas) {
            let access = Access {
                cluster_port: crate::free_port()?,
                ..access.clone()
            };
            cluster.members.push(RedisServer::start_free(access)?);
        }
        let mut cli = Command::new("redis-cli");
        cli.args([
            "--user",
            ADMIN_USER,
            "--pass",
            ADMIN_PASSWORD,
            "--no-auth-warning",
        ]);
        if let Some(tls) = &tls {
            cli.arg("--tls")
                .arg("--cacert")
                .arg(&tls.ca_file)
                .arg("--cert")
                .arg(&tls.client_cert_file)
                .arg("--key")
                .arg(&tls.client_key_file);
        }
        let out = cli
            .args(["--cluster", "create"])
            .args(
                cluster
                    .members
                    .iter()
                    .map(|m| format!("127.0.0.1:{}", m.port)),
            )
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .context("running redis-cli --cluster create")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        cluster.wait_ok(primaries * (1 + replicas))?;
        Ok(cluster)
    }

    /// Waits until every running member says `cluster_state:ok` and knows
    /// `members` members, and every replica's link to its primary is up.
    ///
    /// # Errors
    /// Not so within [`GUARD`].
    pub fn wait_ok(&self, members: usize) -> anyhow::Result<()> {
        let mut waited = Duration::ZERO;
        loop {
            let mut last = String::new();
            let ok = self.members.iter().filter(|m| m.is_running()).all(|m| {
                match m.command(&["CLUSTER", "INFO"]) {
                    Ok(info) => {
                        let replication = m.command(&["INFO", "replication"]).unwrap_or_default();
                        let linked = replication.contains("role:master")
                            || replication.contains("master_link_status:up");
                        let ok = linked
                            && info.contains("cluster_state:ok")
                            && info.contains(&format!("cluster_known_nodes:{members}"));
                        if !ok {
                            last = info;
                        }
                        ok
                    }
                    Err(err) => {
                        last = err.to_string();
                        false
                    }
                }
            });
            if ok {
                return Ok(());
            }
            if waited >= GUARD {
                bail!("the redis cluster is not ok:\n{last}");
            }
            std::thread::sleep(PROBE_INTERVAL * 5);
            waited += PROBE_INTERVAL * 5;
        }
    }

    /// The URL a node uses: `redis+cluster://<user>:<password>@` and every
    /// member's address.
    pub fn node_url(&self) -> String {
        let (user, password) = self.members[0].access.user.clone().unwrap_or_default();
        let seeds: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.port))
            .collect();
        let scheme = if self.members[0].access.tls.is_some() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        format!("{scheme}://{user}:{password}@{}", seeds.join(","))
    }

    /// The members, primaries and replicas, in the order they started.
    pub fn members(&self) -> &[RedisServer] {
        &self.members
    }

    /// The member that is the primary of the slot of `key` now.
    ///
    /// # Errors
    /// No running member answers `CLUSTER KEYSLOT` / `CLUSTER NODES`, or
    /// none holds the slot.
    pub fn primary_of(&self, key: &str) -> anyhow::Result<&RedisServer> {
        let probe = self
            .members
            .iter()
            .find(|m| m.is_running())
            .context("no member runs")?;
        let slot: u16 = probe.command(&["CLUSTER", "KEYSLOT", key])?.parse()?;
        let nodes = probe.command(&["CLUSTER", "NODES"])?;
        for line in nodes.lines() {
            // <id> <ip:port@bus> <flags> <primary> <ping> <pong> <epoch> <state> <slots>...
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let holds = fields[8..].iter().any(|range| {
                let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
            });
            if holds {
                let port: u16 = fields[1]
                    .split(['@', ':'])
                    .nth(1)
                    .and_then(|p| p.parse().ok())
                    .context("member address")?;
                return self
                    .members
                    .iter()
                    .find(|m| m.port == port)
                    .context("the slot's primary is not a member");
            }
        }
        bail!("no primary holds slot {slot}:\n{nodes}")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for member in &self.members {
            member.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Sentinel (`redis-server <file> --sentinel`) on a free loopback
/// port, monitoring one primary; killed on drop, its directory removed.
/// Sentinel rewrites its configuration file as it learns the replicas and
/// the other Sentinels, so each has a directory of its own.
#[derive(Debug)]
pub struct Sentinel {
    port: u16,
    child: Mutex<Option<Child>>,
    dir: PathBuf,
}

impl Sentinel {
    /// Starts a Sentinel that monitors `primary` as `master`, with
    /// `quorum` Sentinels needed to agree it is down, and fast timings
    /// (down after 1 s, failover timeout 5 s); waits until it answers.
    ///
    /// # Errors
    /// `redis-server` is missing, exits, or does not answer within [`GUARD`].
    pub fn start(primary: &RedisServer, master: &str, quorum: usize) -> anyhow::Result<Self> {
        let port = crate::free_port()?;
        let dir = std::env::temp_dir().join(format!("mcp-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).context("sentinel directory")?;
        let file = dir.join("sentinel.conf");
        std::fs::write(
            &file,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {master} 127.0.0.1 {primary} {quorum}\n\
                 sentinel down-after-milliseconds {master} 1000\n\
                 sentinel failover-timeout {master} 5000\n\
                 sentinel parallel-syncs {master} 1\n",
                dir = dir.display(),
                primary = primary.port(),
            ),
        )
        .context("sentinel configuration")?;
        let child = Command::new("redis-server")
            .arg(&file)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("spawning redis-server --sentinel")?;
        let sentinel = Self {
            port,
            child: Mutex::new(Some(child)),
            dir,
        };
        let mut waited = Duration::ZERO;
        while sentinel.cli(&["PING"]).map(|r| r.trim() == "PONG") != Ok(true) {
            if waited >= GUARD {
                bail!("redis sentinel on port {port} did not answer");
            }
            std::thread::sleep(PROBE_INTERVAL);
            waited += PROBE_INTERVAL;
        }
        Ok(sentinel)
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port of the primary it names for `master` now.
    ///
    /// # Errors
    /// `redis-cli` fails, or the answer is not an address.
    pub fn primary_port(&self, master: &str) -> anyhow::Result<u16> {
        let reply = self
            .cli(&["SENTINEL", "get-master-addr-by-name", master])
            .map_err(|err| anyhow::anyhow!(err))?;
        reply
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
            .with_context(|| format!("sentinel answered {reply:?}"))
    }

    /// One command through `redis-cli` (part of Debian's redis-tools,
    /// installed with redis-server): its output, or why it failed.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .map_err(|err| format!("redis-cli: {err}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_ping_and_counts_clients() {
        let redis = RedisServer::start().unwrap();
        assert!(redis.is_running());
        assert_eq!(redis.url(), format!("redis://127.0.0.1:{}/", redis.port()));
        assert_eq!(redis.command(&["PING"]).unwrap(), "PONG");
        // The probes' connections are closed by now, but the server may
        // not have processed their closing yet: wait (at most 5 s) for it.
        for _ in 0..500 {
            if redis.client_count().unwrap() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(redis.client_count().unwrap(), 0);

        let held = TcpStream::connect(redis.addr()).unwrap();
        // The server registers a client on accept; PING on it to be sure.
        let mut held_reader = BufReader::new(held.try_clone().unwrap());
        (&held).write_all(b"PING\r\n").unwrap();
        let mut pong = String::new();
        held_reader.read_line(&mut pong).unwrap();
        assert_eq!(pong, "+PONG\r\n");
        assert_eq!(redis.client_count().unwrap(), 1);
        drop(held_reader);
        drop(held);
    }

    #[test]
    fn starts_on_a_chosen_port_and_refuses_a_taken_one() {
        let port = crate::free_port().unwrap();
        let redis = RedisServer::start_on(port).unwrap();
        assert_eq!(redis.port(), port);
        assert_eq!(redis.command(&["PING"]).unwrap(), "PONG");
        let err = RedisServer::start_on(port).unwrap_err();
        assert!(err.to_string().contains("exited"), "{err:#}");
        assert_eq!(redis.command(&["PING"]).unwrap(), "PONG");
    }

    #[test]
    fn keeps_nothing_on_disk() {
        let redis = RedisServer::start().unwrap();
        assert_eq!(redis.command(&["SET", "k", "v"]).unwrap(), "OK");
        redis.restart().unwrap();
        assert_eq!(redis.command(&["EXISTS", "k"]).unwrap(), "0");
    }

    #[test]
    fn stop_and_restart_on_the_same_port() {
        let redis = RedisServer::start().unwrap();
        let port = redis.port();
        redis.stop().unwrap();
        assert!(!redis.is_running());
        assert!(TcpStream::connect(redis.addr()).is_err());
        redis.stop().unwrap();

        redis.restart().unwrap();
        assert!(redis.is_running());
        assert_eq!(redis.port(), port);
        assert_eq!(redis.command(&["PING"]).unwrap(), "PONG");
    }

    #[test]
    fn a_tls_server_with_an_acl_user_answers_only_over_tls_with_the_password() {
        let pki = TestPki::new().unwrap();
        let redis = RedisServer::start_tls(&pki, Some(("mcp", "s3cret"))).unwrap();
        assert!(redis.url().starts_with("rediss://127.0.0.1:"));
        assert_eq!(
            redis.url_as("mcp", "s3cret"),
            format!("rediss://mcp:s3cret@127.0.0.1:{}/", redis.port())
        );
        assert_eq!(redis.command(&["PING"]).unwrap(), "PONG");
        // The probes log in as the admin; the user may send exactly what
        // a node sends.
        assert_eq!(redis.command(&["ACL", "WHOAMI"]).unwrap(), ADMIN_USER);
        let as_user = Access {
            restricted: false,
            ..redis.access.clone()
        };
        assert_eq!(
            command(&as_user, redis.port(), &["PING"]).unwrap(),
            Reply::Simple("PONG".into())
        );
        let refused = command(&as_user, redis.port(), &["KEYS", "*"]).unwrap();
        assert!(
            matches!(&refused, Reply::Error(e) if e.starts_with("NOPERM")),
            "{refused:?}"
        );
        // Plain RESP on the TLS port gets no answer.
        assert!(command(&Access::default(), redis.port(), &["PING"]).is_err());
        // Neither does the right certificate with the wrong password.
        let wrong = Access {
            user: Some(("mcp".into(), "wrong".into())),
            ..as_user
        };
        let err = command(&wrong, redis.port(), &["PING"]).unwrap_err();
        assert!(err.to_string().contains("WRONGPASS"), "{err:#}");
        redis.restart().unwrap();
        assert_eq!(redis.command(&["PING"]).unwrap(), "PONG");
    }
}
