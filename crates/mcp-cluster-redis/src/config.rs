//! Configuration of the Redis store, and the Redis client it makes
//! (credentials and TLS files read each time a store connects).

use std::fmt;
#[cfg(feature = "client")]
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use mcp_cluster_store::ByteBudget;
use mcp_cluster_store::memory::Retention;
use mcp_cluster_telemetry::Secret;
#[cfg(feature = "client")]
use redis::{ConnectionAddr, IntoConnectionInfo};
use serde::{Deserialize, Serialize};

use crate::ClusterError;
use crate::keys::DEFAULT_PREFIX;
#[cfg(feature = "client")]
use crate::target::Target;

/// How a node reaches Redis and what it keeps there. `Debug` redacts the
/// URL's password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisConfig {
    /// Redis URL, `redis://[[user]:password@]host[:port][/db]`, or
    /// `rediss://…` for TLS (the server's certificate is verified against
    /// `ca_file`, else the system's roots, and must name `host`). Behind
    /// Sentinels: `redis+sentinel://[[user]:password@]host[:port][,host[:port]…]/<master>[/db]`
    /// (Sentinel port 26379 when none is given; `rediss+sentinel://` for
    /// TLS to the Sentinels and the primary alike), the node then asks the
    /// Sentinels for the primary of `<master>` and asks again when it fails
    /// over; the credentials are the primary's. A Redis Cluster:
    /// `redis+cluster://[[user]:password@]host[:port][,host[:port]…]` (port
    /// 6379 when none is given; `rediss+cluster://` for TLS), members the
    /// node learns the cluster's layout from; keys then spread over its
    /// shards. Default
    /// `redis://127.0.0.1:6379`: a local Redis, nothing leaves the host
    /// unless configured to. May hold a user (an ACL user) and a password,
    /// percent-encoded (`/` as `%2F`, `?` as `%3F`, `#` as `%23`, `@` as
    /// `%40`); never `?password=`, which the Redis client ignores (refused).
    /// Logs and errors show it as [`Self::redacted_url`] does.
    pub url: String,
    /// A file holding the password (the ACL user's, or `requirepass`'s),
    /// one trailing newline ignored; read by every [`crate::connect`] (a
    /// starting node calls it until Redis accepts it, so a corrected secret
    /// is picked up), while the connections of a connected store reconnect
    /// with what they were opened with. Instead of a password in `url`: the
    /// URL can then sit in plain configuration and the password in a
    /// secret. Default none.
    pub password_file: Option<PathBuf>,
    /// PEM file of the CA certificates that sign Redis's certificate,
    /// trusted instead of the system's roots (`rediss://` only). Default
    /// none: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM certificate chain the node presents to Redis (`tls-auth-clients
    /// yes`), with `client_key_file` (`rediss://` only). Default none.
    pub client_cert_file: Option<PathBuf>,
    /// PEM private key of `client_cert_file`. Default none.
    pub client_key_file: Option<PathBuf>,
    /// First part of every key and channel, so several clusters can share one
    /// Redis. Default `mcp`. Must be non-empty, without braces (they would
    /// change the hash tags) or whitespace.
    pub key_prefix: String,
    /// Milliseconds a command (or a connection attempt) may take before it
    /// fails with `StoreError::Unavailable`. Default 1000: a request fails
    /// fast with a clear error while Redis is away instead of hanging.
    pub command_timeout_ms: u64,
    /// Replicas that must hold a write a failover must not lose before the
    /// node answers for it: an event of a stream (a response above all), a
    /// stream's close, a session's record and subscriptions, a task. After
    /// each such write the node sends `WAIT` on the same connection.
    /// Replication is asynchronous: without it, the last writes a primary
    /// acknowledged before it died can be missing from the replica
    /// promoted in its place. Default none, which means 1 behind Sentinels
    /// and on a Redis Cluster, 0 (no wait) on one Redis. See
    /// `replica_ack_timeout_ms` for a replica that does not answer.
    pub replica_acks: Option<u32>,
    /// Milliseconds a write waits for `replica_acks` replicas. Default 200.
    /// A wait that comes back short (no replica, or one far behind: the
    /// write stands on the primary alone) makes the node stop waiting for
    /// the next 5 s, so that a primary without replicas (just after a
    /// failover) costs one such wait per 5 s, not one per write. Must be
    /// below `command_timeout_ms`.
    pub replica_ack_timeout_ms: u64,
    /// Event log retention. Not read from configuration files: a node sets
    /// it from its `[retention]` section, which governs both stores.
    #[serde(skip)]
    pub retention: RedisRetention,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".to_owned(),
            password_file: None,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            key_prefix: DEFAULT_PREFIX.to_owned(),
            command_timeout_ms: 1000,
            replica_acks: None,
            replica_ack_timeout_ms: 200,
            retention: RedisRetention::default(),
        }
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("password_file", &self.password_file)
            .field("ca_file", &self.ca_file)
            .field("client_cert_file", &self.client_cert_file)
            .field("client_key_file", &self.client_key_file)
            .field("key_prefix", &self.key_prefix)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("replica_acks", &self.replica_acks)
            .field("replica_ack_timeout_ms", &self.replica_ack_timeout_ms)
            .field("retention", &self.retention)
            .finish()
    }
}

impl RedisConfig {
    /// The URL for logs and errors: a URL the node accepts with its
    /// password and query values as `***`
    /// ([`mcp_cluster_telemetry::redacted_url`]); one it does not, as its
    /// scheme and host only, or `(unparsable)`
    /// ([`mcp_cluster_telemetry::url_scheme_and_host`]): a URL that does
    /// not parse may have its password where the host should be.
    pub fn redacted_url(&self) -> String {
        if self.url_facts().is_ok() {
            mcp_cluster_telemetry::redacted_url(&self.url)
        } else {
            mcp_cluster_telemetry::url_scheme_and_host(&self.url)
        }
    }

    /// [`RedisConfig::command_timeout_ms`] as a duration.
    pub fn command_timeout(&self) -> Duration {
        Duration::from_millis(self.command_timeout_ms)
    }

    /// Checks the values that cannot work.
    ///
    /// # Errors
    /// [`ClusterError::Config`] naming the first bad field.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let bad = |what: &str| Err(ClusterError::Config(what.to_owned()));
        // Parsing only, no connection: a URL that does not parse is a
        // configuration error at startup, not a reason to retry. The
        // client's message never quotes the URL (it may hold a password).
        let url = self.url_facts()?;
        let tls_files = [&self.ca_file, &self.client_cert_file, &self.client_key_file];
        if tls_files.iter().any(|file| file.is_some()) && !url.tls {
            return bad("ca_file, client_cert_file and client_key_file need a rediss:// url");
        }
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return bad("client_cert_file and client_key_file go together");
        }
        let files = [
            ("password_file", &self.password_file),
            ("ca_file", &self.ca_file),
            ("client_cert_file", &self.client_cert_file),
            ("client_key_file", &self.client_key_file),
        ];
        if let Some((name, _)) = files
            .iter()
            .find(|(_, file)| file.as_ref().is_some_and(|f| f.as_os_str().is_empty()))
        {
            return Err(ClusterError::Config(format!("{name} is empty")));
        }
        if self.password_file.is_some() && url.password {
            return bad("the url holds a password and password_file is set: give one of them");
        }
        if self.key_prefix.is_empty()
            || !self
                .key_prefix
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
        {
            return bad("key_prefix must be non-empty visible ASCII without braces");
        }
        if self.command_timeout_ms == 0 {
            return bad("command_timeout_ms must be positive");
        }
        let waits = self.replica_acks != Some(0);
        if waits
            && (self.replica_ack_timeout_ms == 0
                || self.replica_ack_timeout_ms >= self.command_timeout_ms)
        {
            return bad("replica_ack_timeout_ms must be positive and below command_timeout_ms");
        }
        if self.retention.closed_stream_ttl_ms == 0 || self.retention.idle_stream_ttl_ms == 0 {
            return bad("retention TTLs must be positive");
        }
        Ok(())
    }
}

/// Query keys that would carry a password: the Redis client reads none of
/// them from a `redis://` or `rediss://` URL (only from `redis+unix://`'s
/// `pass`), so the node would connect without it and fail, retrying.
const PASSWORD_QUERY_KEYS: &[&str] = &["password", "pass", "requirepass"];

/// Checks what every form of the URL needs before it is read, without
/// quoting it (the errors show [`mcp_cluster_telemetry::url_scheme_and_host`]):
/// a scheme, user info whose reserved characters are encoded, and no
/// password in the query.
fn check_url_text(url: &str) -> Result<(), ClusterError> {
    let bad = |what: &str| {
        Err(ClusterError::Config(format!(
            "url {}: {what}",
            mcp_cluster_telemetry::url_scheme_and_host(url)
        )))
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad(
            "not a URL: it starts with redis://, rediss://, redis+sentinel://, \
             rediss+sentinel://, redis+cluster:// or rediss+cluster://",
        );
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if rest[end..].contains('@') {
        return bad(
            "an '@' after the host: a password holding '/', '?', '#' or '@' must have them \
             percent-encoded (%2F, %3F, %23, %40)",
        );
    }
    if matches!(scheme, "redis" | "rediss" | "valkey" | "valkeys")
        && let Some((_, query)) = rest[end..].split_once('?')
        && query.split(['&', '#']).any(|pair| {
            let key = pair.split_once('=').map_or(pair, |(key, _)| key);
            PASSWORD_QUERY_KEYS
                .iter()
                .any(|k| key.eq_ignore_ascii_case(k))
        })
    {
        return bad(
            "a password in the query is not read by the Redis client: give it in the user \
             info (redis://[user]:<password>@host) or in password_file",
        );
    }
    Ok(())
}

/// What validation reads of the URL.
struct UrlFacts {
    /// `rediss://`.
    tls: bool,
    /// It holds a password.
    password: bool,
}

impl RedisConfig {
    /// The URL parsed by the Redis client.
    #[cfg(feature = "client")]
    fn url_facts(&self) -> Result<UrlFacts, ClusterError> {
        check_url_text(&self.url)?;
        if let Some(sentinel) = self.sentinel_url() {
            return sentinel.map(|url| UrlFacts {
                tls: url.tls,
                password: url.password.is_some(),
            });
        }
        if let Some(cluster) = self.cluster_url() {
            return cluster.map(|url| UrlFacts {
                tls: url.tls,
                password: url.password.is_some(),
            });
        }
        match self.url.as_str().into_connection_info() {
            Ok(info) => Ok(UrlFacts {
                tls: is_tls(info.addr()),
                password: info.redis_settings().password().is_some(),
            }),
            Err(err) => Err(self.url_error(&err.to_string())),
        }
    }

    /// The URL read by its scheme and user info only: without the Redis
    /// client (feature `client`) no store can be opened anyway.
    #[cfg(not(feature = "client"))]
    fn url_facts(&self) -> Result<UrlFacts, ClusterError> {
        check_url_text(&self.url)?;
        if let Some(sentinel) = self.sentinel_url() {
            return sentinel.map(|url| UrlFacts {
                tls: url.tls,
                password: url.password.is_some(),
            });
        }
        if let Some(cluster) = self.cluster_url() {
            return cluster.map(|url| UrlFacts {
                tls: url.tls,
                password: url.password.is_some(),
            });
        }
        let Some((scheme, rest)) = self.url.split_once("://") else {
            return Err(self.url_error("not a redis:// or rediss:// URL"));
        };
        let authority = rest.split('/').next().unwrap_or_default();
        Ok(UrlFacts {
            tls: scheme == "rediss",
            password: authority
                .rsplit_once('@')
                .is_some_and(|(user, _)| user.contains(':')),
        })
    }

    /// Whether the URL is `rediss://` (TLS).
    pub fn is_tls(&self) -> bool {
        self.url_facts().is_ok_and(|url| url.tls)
    }

    #[cfg(feature = "client")]
    /// The Redis client of this configuration, for a URL that names one
    /// server (`redis://`, `rediss://`): as [`Self::target`], which a
    /// `redis+sentinel://` URL (its primary moves) or a `redis+cluster://`
    /// one (many servers) needs.
    ///
    /// # Errors
    /// As [`Self::target`], and [`ClusterError::Config`] for a Sentinel URL.
    pub fn client(&self) -> Result<redis::Client, ClusterError> {
        self.target()?.into_direct().ok_or_else(|| {
            ClusterError::Config(
                "a redis+sentinel or redis+cluster url names no one server: ask target() for where connections go".into(),
            )
        })
    }

    #[cfg(feature = "client")]
    /// Where this configuration's connections go (one Redis, or the primary
    /// its Sentinels name): the URL, the password of `password_file`, and
    /// for TLS the CA and client certificate files. Reads the files now
    /// (the caller builds a target per connection attempt, so rotated files
    /// are picked up); connects to nothing.
    ///
    /// # Errors
    /// [`ClusterError::Config`] when the configuration is invalid or a file
    /// cannot be read or parsed, naming the file (never the password).
    pub fn target(&self) -> Result<Target, ClusterError> {
        self.validate()?;
        let password = self
            .password_file
            .as_deref()
            .map(read_password)
            .transpose()?;
        if let Some(sentinel) = self.sentinel_url() {
            let url = sentinel?;
            let certificates = url.tls.then(|| self.tls_certificates()).transpose()?;
            return Target::sentinel(url, password, certificates);
        }
        if let Some(cluster) = self.cluster_url() {
            let url = cluster?;
            let certificates = url.tls.then(|| self.tls_certificates()).transpose()?;
            return Target::cluster(url, password, certificates, self.command_timeout());
        }
        let mut info = self
            .url
            .as_str()
            .into_connection_info()
            .map_err(ClusterError::Url)?;
        if let Some(password) = password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        info = info.set_tcp_settings(crate::target::tcp_settings());
        if !is_tls(info.addr()) {
            return redis::Client::open(info)
                .map(Target::direct)
                .map_err(ClusterError::Url);
        }
        redis::Client::build_with_tls(info, self.tls_certificates()?)
            .map(Target::direct)
            .map_err(|err| ClusterError::Config(format!("tls files: {err}")))
    }

    /// The `rediss` CA and client certificate files, read now.
    #[cfg(feature = "client")]
    fn tls_certificates(&self) -> Result<redis::TlsCertificates, ClusterError> {
        let root_cert = self
            .ca_file
            .as_deref()
            .map(|path| read_pem(path, "ca_file", PemKind::Certificates))
            .transpose()?;
        let client_tls = match (&self.client_cert_file, &self.client_key_file) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read_pem(cert, "client_cert_file", PemKind::Certificates)?,
                client_key: read_pem(key, "client_key_file", PemKind::PrivateKey)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }

    /// The URL read as a Sentinel URL; `None` when it is not one.
    fn sentinel_url(&self) -> Option<Result<SentinelUrl, ClusterError>> {
        SentinelUrl::parse(&self.url).map(|parsed| parsed.map_err(|err| self.url_error(&err)))
    }

    /// The URL read as a Redis Cluster URL; `None` when it is not one.
    fn cluster_url(&self) -> Option<Result<ClusterUrl, ClusterError>> {
        ClusterUrl::parse(&self.url).map(|parsed| parsed.map_err(|err| self.url_error(&err)))
    }

    /// An error about a URL that does not parse: it may hold its password
    /// where the host should be, so it shows as its scheme and host only.
    fn url_error(&self, err: &str) -> ClusterError {
        ClusterError::Config(format!(
            "url {}: {err}",
            mcp_cluster_telemetry::url_scheme_and_host(&self.url)
        ))
    }
}

/// Port of a Sentinel address that gives none.
const SENTINEL_PORT: u16 = 26379;
/// Port of a Redis Cluster seed that gives none.
const REDIS_PORT: u16 = 6379;

/// A `redis+sentinel://` (or `rediss+sentinel://`) URL, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// `rediss+sentinel://`: TLS to the Sentinels and to the primary.
    pub(crate) tls: bool,
    /// The primary's ACL user.
    pub(crate) username: Option<String>,
    /// The primary's password (a `Secret`: these URLs derive `Debug`).
    pub(crate) password: Option<Secret>,
    /// The Sentinels, in the order given (asked in that order).
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The name the Sentinels monitor the primary under.
    pub(crate) master: String,
    /// The database number.
    pub(crate) db: i64,
}

/// A `redis+cluster://` (or `rediss+cluster://`) URL, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterUrl {
    /// `rediss+cluster://`: TLS to every member.
    pub(crate) tls: bool,
    /// The members' ACL user.
    pub(crate) username: Option<String>,
    /// The members' password (a `Secret`: these URLs derive `Debug`).
    pub(crate) password: Option<Secret>,
    /// Members to learn the cluster's layout from (any of them answers).
    pub(crate) seeds: Vec<(String, u16)>,
}

/// The user info and hosts of a URL with several hosts, and what follows
/// them (after the first `/`, `None` without one).
struct Authority<'a> {
    username: Option<String>,
    password: Option<String>,
    hosts: &'a str,
    path: Option<&'a str>,
}

impl<'a> Authority<'a> {
    fn parse(rest: &'a str) -> Result<Self, String> {
        let (authority, path) = match rest.split_once('/') {
            Some((authority, path)) => (authority, Some(path)),
            None => (rest, None),
        };
        if path.unwrap_or(authority).contains(['?', '#']) {
            return Err("takes no query or fragment".into());
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (username, password) = match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
            None => (None, None),
            Some((user, password)) => (
                Some(decode(user, "user")?).filter(|u| !u.is_empty()),
                Some(decode(password, "password")?).filter(|p| !p.is_empty()),
            ),
        };
        Ok(Self {
            username,
            password,
            hosts,
            path,
        })
    }

    /// The hosts, `default_port` where one gives none.
    fn hosts(&self, what: &str, default_port: u16) -> Result<Vec<(String, u16)>, String> {
        self.hosts
            .split(',')
            .map(|host| host_port(host, what, default_port))
            .collect()
    }
}

/// `text` percent-decoded; the error names `what`, never the text.
fn decode(text: &str, what: &str) -> Result<String, String> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|text| text.into_owned())
        .map_err(|_| format!("its {what} is not UTF-8 once decoded"))
}

impl SentinelUrl {
    /// Reads `url` when its scheme is `redis+sentinel` or
    /// `rediss+sentinel`; `None` for any other scheme. The error never
    /// quotes the user info.
    pub(crate) fn parse(url: &str) -> Option<Result<Self, String>> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            (false, rest)
        } else {
            (true, url.strip_prefix("rediss+sentinel://")?)
        };
        Some(Self::parse_rest(tls, rest))
    }

    fn parse_rest(tls: bool, rest: &str) -> Result<Self, String> {
        const NO_MASTER: &str = "names no master: end it with /<master name>";
        let authority = Authority::parse(rest)?;
        let path = authority.path.ok_or(NO_MASTER)?;
        let sentinels = authority.hosts("Sentinel", SENTINEL_PORT)?;
        let (master, db) = path.split_once('/').unwrap_or((path, ""));
        let master = decode(master, "master name")?;
        if master.is_empty() {
            return Err(NO_MASTER.into());
        }
        let db = match db {
            "" => 0,
            db => db
                .parse::<i64>()
                .ok()
                .filter(|db| *db >= 0)
                .ok_or_else(|| format!("database {db:?} is not a number"))?,
        };
        Ok(Self {
            tls,
            username: authority.username,
            password: authority.password.map(Secret::new),
            sentinels,
            master,
            db,
        })
    }
}

impl ClusterUrl {
    /// Reads `url` when its scheme is `redis+cluster` or `rediss+cluster`;
    /// `None` for any other scheme. The error never quotes the user info.
    pub(crate) fn parse(url: &str) -> Option<Result<Self, String>> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
            (false, rest)
        } else {
            (true, url.strip_prefix("rediss+cluster://")?)
        };
        Some(Self::parse_rest(tls, rest))
    }

    fn parse_rest(tls: bool, rest: &str) -> Result<Self, String> {
        let authority = Authority::parse(rest)?;
        // A Redis Cluster has database 0 only.
        if !matches!(authority.path, None | Some("" | "0")) {
            return Err("names a database: a Redis Cluster has database 0 only".into());
        }
        Ok(Self {
            tls,
            seeds: authority.hosts("cluster member", REDIS_PORT)?,
            username: authority.username,
            password: authority.password.map(Secret::new),
        })
    }
}

/// One address: `host[:port]` or `[v6]:port`; `what` names it in the error.
fn host_port(text: &str, what: &str, default_port: u16) -> Result<(String, u16), String> {
    let bad = || format!("{what} address {text:?} is not host[:port]");
    let (host, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            match after {
                "" => (host, None),
                after => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
            }
        }
        None => match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    if host.is_empty() || host.contains(['@', '/', '[', ']']) {
        return Err(bad());
    }
    let port = match port {
        None => default_port,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(bad)?,
    };
    Ok((host.to_owned(), port))
}

#[cfg(feature = "client")]
/// Whether `addr` is a TLS address (`rediss://`).
fn is_tls(addr: &ConnectionAddr) -> bool {
    matches!(addr, ConnectionAddr::TcpTls { .. })
}

#[cfg(feature = "client")]
/// What a PEM file must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PemKind {
    /// At least one certificate.
    Certificates,
    /// A private key.
    PrivateKey,
}

#[cfg(feature = "client")]
/// Reads a PEM file and checks that it holds what `kind` says (the Redis
/// client's own parse errors do not name the file).
fn read_pem(path: &Path, name: &str, kind: PemKind) -> Result<Vec<u8>, ClusterError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |what: String| ClusterError::Config(format!("{name} {}: {what}", path.display()));
    let pem = std::fs::read(path).map_err(|err| bad(err.to_string()))?;
    match kind {
        PemKind::Certificates => {
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| bad(format!("not PEM certificates ({err})")))?;
            if certs.is_empty() {
                return Err(bad("no PEM certificate in it".to_owned()));
            }
        }
        PemKind::PrivateKey => {
            PrivateKeyDer::from_pem_slice(&pem)
                .map_err(|err| bad(format!("no PEM private key in it ({err})")))?;
        }
    }
    Ok(pem)
}

#[cfg(feature = "client")]
/// The password in `path`, without one trailing newline.
fn read_password(path: &Path) -> Result<String, ClusterError> {
    let bad =
        |what: &str| ClusterError::Config(format!("password_file {}: {what}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|err| bad(&err.to_string()))?;
    let password = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
    if password.is_empty() {
        return Err(bad("empty"));
    }
    Ok(password.to_owned())
}

/// Event log retention in Redis: the same knobs as the in-memory
/// [`Retention`] except the stream cap (Redis bounds memory by TTL and its
/// own `maxmemory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisRetention {
    /// Most events kept per stream. Trimming is exact (`XDEL` of each
    /// oldest entry, never an approximate `~` trim), because a read must tell a gap from a clean resume at the
    /// newest dropped entry, as the in-memory log does. Default 10,000:
    /// enough to resume a long tool call's full progress history.
    pub max_events_per_stream: usize,
    /// Milliseconds a closed stream stays readable, for clients that resume
    /// after the response was written. Default 300,000 (5 minutes).
    pub closed_stream_ttl_ms: u64,
    /// Milliseconds an open stream with no append or touch is kept, as a
    /// bound on streams a vanished writer left behind. Default 3,600,000
    /// (1 hour).
    pub idle_stream_ttl_ms: u64,
    /// Bytes of events kept per stream, as in the in-memory log. Set from
    /// the node's `[retention]`.
    #[serde(skip)]
    pub max_stream_bytes: u64,
    /// Bytes of closed streams this node wrote that it keeps in Redis
    /// (per node, per session). Set from the node's `[retention]`.
    #[serde(skip)]
    pub closed_streams: ByteBudget,
    /// Bytes of finished tasks this node ended that it keeps in Redis (per
    /// node, per client). Set from the node's `[retention]`.
    #[serde(skip)]
    pub finished_tasks: ByteBudget,
}

impl Default for RedisRetention {
    fn default() -> Self {
        Self::from(Retention::default())
    }
}

impl From<Retention> for RedisRetention {
    fn from(r: Retention) -> Self {
        Self {
            max_events_per_stream: r.max_events_per_stream,
            closed_stream_ttl_ms: millis(r.closed_stream_ttl),
            idle_stream_ttl_ms: millis(r.idle_stream_ttl),
            max_stream_bytes: r.max_stream_bytes,
            closed_streams: r.closed_streams,
            finished_tasks: r.finished_tasks,
        }
    }
}

/// A duration in whole milliseconds, at least 1 (Redis refuses `PX 0`).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_loopback_and_match_the_memory_retention() {
        let c = RedisConfig::default();
        assert!(c.url.starts_with("redis://127.0.0.1"));
        assert_eq!(c.retention.max_events_per_stream, 10_000);
        assert_eq!(c.retention.closed_stream_ttl_ms, 300_000);
        assert_eq!(c.retention.idle_stream_ttl_ms, 3_600_000);
        c.validate().unwrap();
    }

    #[test]
    fn partial_config_fills_defaults_and_bad_values_are_refused() {
        let c: RedisConfig = serde_json::from_str(r#"{"key_prefix": "blue"}"#).unwrap();
        assert_eq!(c.key_prefix, "blue");
        assert_eq!(c.command_timeout_ms, 1000);
        assert!(serde_json::from_str::<RedisConfig>(r#"{"nope": 1}"#).is_err());
        // Retention is the node's `[retention]`, never read from here.
        let with_retention = r#"{"retention": {"max_events_per_stream": 5}}"#;
        assert!(serde_json::from_str::<RedisConfig>(with_retention).is_err());
        for url in [
            "",
            "redis//127.0.0.1",
            "http://127.0.0.1",
            "redis://127.0.0.1:port",
        ] {
            let c = RedisConfig {
                url: url.into(),
                ..RedisConfig::default()
            };
            assert!(
                matches!(c.validate(), Err(ClusterError::Config(_))),
                "{url:?}"
            );
        }
        for prefix in ["", "a{b", "a b"] {
            let c = RedisConfig {
                key_prefix: prefix.into(),
                ..RedisConfig::default()
            };
            assert!(c.validate().is_err(), "{prefix:?}");
        }
        // A replica wait as long as a whole command is refused; with no
        // wait asked for, its timeout does not matter.
        let wait = |acks, timeout| RedisConfig {
            replica_acks: acks,
            replica_ack_timeout_ms: timeout,
            ..RedisConfig::default()
        };
        assert!(wait(None, 1000).validate().is_err());
        assert!(wait(Some(1), 0).validate().is_err());
        wait(Some(1), 999).validate().unwrap();
        wait(Some(0), 0).validate().unwrap();
    }

    #[test]
    fn debug_output_redacts_the_password() {
        for (url, shown) in [
            (
                "redis://:s3cret@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            ("redis://me:s3cret@127.0.0.1", "redis://me:***@127.0.0.1"),
            ("redis://s3cret@127.0.0.1", "redis://***@127.0.0.1"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
        ] {
            let c = RedisConfig {
                url: url.into(),
                ..RedisConfig::default()
            };
            assert_eq!(c.redacted_url(), shown);
            let debug = format!("{c:?}");
            assert!(
                !debug.contains("s3cret") && debug.contains(shown),
                "{debug}"
            );
        }
    }

    #[test]
    fn no_form_of_a_bad_url_shows_its_password() {
        // Each form the node accepts, with a password holding a '/' (base64
        // passwords do), with a mistyped scheme, and with `?password=`.
        for (url, says) in [
            (
                "redis://:ab/cd+s3cret==@127.0.0.1:6379",
                "url redis://127.0.0.1:6379: an '@' after the host",
            ),
            (
                "rediss://mcp:ab/s3cret@redis.internal:6380/0",
                "url rediss://redis.internal:6380: an '@'",
            ),
            (
                "redis+sentinel://mcp:ab/s3cret@a:26379,b:26379/m",
                "url redis+sentinel://a:26379,b:26379: an '@'",
            ),
            (
                "rediss+sentinel://mcp:ab/s3cret@a/m",
                "url rediss+sentinel://a: an '@'",
            ),
            (
                "redis+cluster://mcp:ab/s3cret@a:7000,b:7001",
                "url redis+cluster://a:7000,b:7001: an '@'",
            ),
            (
                "rediss+cluster://:ab?s3cret@a:7000",
                "url (unparsable): an '@'",
            ),
            ("redis://:ab#s3cret@h", "url (unparsable): an '@'"),
            (
                "redis//:s3cret@127.0.0.1:6379",
                "url (unparsable): not a URL",
            ),
            (
                "redis:/:s3cret@127.0.0.1:6379",
                "url (unparsable): not a URL",
            ),
            (
                "redis://:s3cret@127.0.0.1:port",
                "url (unparsable): Redis URL did not parse",
            ),
            (
                "redis://127.0.0.1:6379/?password=s3cret",
                "url redis://127.0.0.1:6379: a password in the query",
            ),
            (
                "rediss://h:6380?pass=s3cret&protocol=resp3",
                "url rediss://h:6380: a password in the query",
            ),
            (
                "redis+sentinel://h/m?password=s3cret",
                "url redis+sentinel://h: takes no query",
            ),
            (
                "redis+cluster://h?password=s3cret",
                "url redis+cluster://h: takes no query",
            ),
        ] {
            let c = RedisConfig {
                url: url.into(),
                ..RedisConfig::default()
            };
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(says), "{url}: {err}");
            for shown in [err, c.redacted_url(), format!("{c:?}")] {
                assert!(!shown.contains("s3cret"), "{url}: {shown}");
            }
        }
        // A URL the node accepts shows everything but its secrets.
        for (url, shown) in [
            (
                "redis+sentinel://mcp:ab%2Fs3cret@a:26379,b/m/1",
                "redis+sentinel://mcp:***@a:26379,b/m/1",
            ),
            (
                "redis+unix:///run/redis.sock?pass=s3cret",
                "redis+unix:///run/redis.sock?pass=***",
            ),
            (
                "rediss://h:6380/0?protocol=resp3",
                "rediss://h:6380/0?protocol=resp3",
            ),
        ] {
            let c = RedisConfig {
                url: url.into(),
                ..RedisConfig::default()
            };
            c.validate().unwrap();
            assert_eq!(c.redacted_url(), shown);
            assert!(!format!("{c:?}").contains("s3cret"));
        }
        let sentinel = SentinelUrl::parse("redis+sentinel://u:s3cret@h/m")
            .unwrap()
            .unwrap();
        assert!(!format!("{sentinel:?}").contains("s3cret"));
        let cluster = ClusterUrl::parse("redis+cluster://u:s3cret@h")
            .unwrap()
            .unwrap();
        assert!(!format!("{cluster:?}").contains("s3cret"));
    }

    fn temp_file(name: &str, content: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mcp-cluster-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn tls_files_need_rediss_and_go_in_pairs() {
        let tls = |url: &str, ca: bool, cert: bool, key: bool| RedisConfig {
            url: url.into(),
            ca_file: ca.then(|| "ca.pem".into()),
            client_cert_file: cert.then(|| "client.pem".into()),
            client_key_file: key.then(|| "client.key".into()),
            ..RedisConfig::default()
        };
        tls("rediss://127.0.0.1:6380", true, true, true)
            .validate()
            .unwrap();
        tls("rediss://127.0.0.1:6380", false, false, false)
            .validate()
            .unwrap();
        for (config, says) in [
            (
                tls("redis://127.0.0.1", true, false, false),
                "need a rediss://",
            ),
            (tls("rediss://127.0.0.1", false, true, false), "go together"),
            (tls("rediss://127.0.0.1", false, false, true), "go together"),
        ] {
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        assert!(tls("rediss://h:1", false, false, false).is_tls());
        assert!(!RedisConfig::default().is_tls());
        let empty = RedisConfig {
            ca_file: Some(PathBuf::new()),
            ..tls("rediss://127.0.0.1", false, false, false)
        };
        assert!(
            empty
                .validate()
                .unwrap_err()
                .to_string()
                .contains("ca_file is empty")
        );
    }

    #[test]
    fn the_password_comes_from_the_url_or_the_file_never_both() {
        let file = temp_file("password", "s3cret\n");
        let c = RedisConfig {
            url: "rediss://mcp@127.0.0.1:6380".into(),
            password_file: Some(file),
            ..RedisConfig::default()
        };
        let client = c.client().unwrap();
        let settings = client.get_connection_info().redis_settings();
        assert_eq!(settings.password(), Some("s3cret"));
        assert_eq!(settings.username(), Some("mcp"));
        assert!(!format!("{c:?}").contains("s3cret"));
        let both = RedisConfig {
            url: "redis://mcp:other@127.0.0.1".into(),
            ..c.clone()
        };
        assert!(
            both.validate()
                .unwrap_err()
                .to_string()
                .contains("give one")
        );
        let crlf = temp_file("crlf", "s3cret\r\n");
        assert_eq!(read_password(&crlf).unwrap(), "s3cret");
        let empty = temp_file("empty", "\n");
        assert!(read_password(&empty).is_err());
        let missing = RedisConfig {
            password_file: Some("/nonexistent/password".into()),
            ..c
        };
        let err = missing.target().unwrap_err().to_string();
        assert!(err.contains("password_file /nonexistent/password"), "{err}");
    }

    #[test]
    fn unreadable_or_wrong_tls_files_are_named() {
        let not_pem = temp_file("not.pem", "hello\n");
        let c = RedisConfig {
            url: "rediss://127.0.0.1:6380".into(),
            ca_file: Some(not_pem.clone()),
            ..RedisConfig::default()
        };
        let err = c.target().unwrap_err().to_string();
        assert!(err.contains("ca_file") && err.contains("not.pem"), "{err}");
        let c = RedisConfig {
            ca_file: None,
            client_cert_file: Some("/nonexistent/client.pem".into()),
            client_key_file: Some(not_pem),
            ..c
        };
        let err = c.target().unwrap_err().to_string();
        assert!(
            err.contains("client_cert_file /nonexistent/client.pem"),
            "{err}"
        );
    }

    #[test]
    fn sentinel_urls_name_their_sentinels_master_and_primary_credentials() {
        let url = SentinelUrl::parse("redis+sentinel://a:26380,[::1]:26381,b/mymaster/2")
            .unwrap()
            .unwrap();
        assert_eq!(
            url,
            SentinelUrl {
                tls: false,
                username: None,
                password: None,
                sentinels: vec![
                    ("a".into(), 26380),
                    ("::1".into(), 26381),
                    ("b".into(), SENTINEL_PORT)
                ],
                master: "mymaster".into(),
                db: 2,
            }
        );
        let url = SentinelUrl::parse("rediss+sentinel://mcp:p%40ss@h:1/m")
            .unwrap()
            .unwrap();
        assert!(url.tls);
        assert_eq!(url.username.as_deref(), Some("mcp"));
        assert_eq!(url.password.as_ref().map(Secret::expose), Some("p@ss"));
        assert_eq!((url.master.as_str(), url.db), ("m", 0));
        assert!(SentinelUrl::parse("redis://h:1").is_none());
        for (bad, says) in [
            ("redis+sentinel://h:1", "names no master"),
            ("redis+sentinel://h:1/", "names no master"),
            ("redis+sentinel://h:1,/m", "is not host[:port]"),
            ("redis+sentinel://h:0/m", "is not host[:port]"),
            ("redis+sentinel://h:x/m", "is not host[:port]"),
            ("redis+sentinel://[::1/m", "is not host[:port]"),
            ("redis+sentinel://h/m/x", "is not a number"),
            ("redis+sentinel://h/m?protocol=resp3", "no query"),
        ] {
            let err = SentinelUrl::parse(bad).unwrap().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        // Validation reads it, and the error never quotes the password.
        let c = RedisConfig {
            url: "redis+sentinel://u:s3cret@h:1,/m".into(),
            ..RedisConfig::default()
        };
        let err = c.validate().unwrap_err().to_string();
        assert!(
            !err.contains("s3cret") && err.contains("url (unparsable)"),
            "{err}"
        );
        let c = RedisConfig {
            url: "rediss+sentinel://h:1/m".into(),
            ..RedisConfig::default()
        };
        assert!(c.is_tls());
        let target = c.target().unwrap();
        assert!(target.follows_failovers() && target.is_tls());
        let err = c.client().unwrap_err().to_string();
        assert!(err.contains("ask target()"), "{err}");
    }

    #[test]
    fn cluster_urls_name_their_seeds_and_credentials() {
        let url = ClusterUrl::parse("redis+cluster://a:7000,[::1]:7001,b")
            .unwrap()
            .unwrap();
        assert_eq!(
            url,
            ClusterUrl {
                tls: false,
                username: None,
                password: None,
                seeds: vec![
                    ("a".into(), 7000),
                    ("::1".into(), 7001),
                    ("b".into(), REDIS_PORT)
                ],
            }
        );
        let url = ClusterUrl::parse("rediss+cluster://mcp:p%40ss@h:1/0")
            .unwrap()
            .unwrap();
        assert!(url.tls);
        assert_eq!(url.username.as_deref(), Some("mcp"));
        assert_eq!(url.password.as_ref().map(Secret::expose), Some("p@ss"));
        assert!(ClusterUrl::parse("redis+sentinel://h:1/m").is_none());
        for (bad, says) in [
            ("redis+cluster://h:1/2", "database 0 only"),
            ("redis+cluster://h:1,,h:2", "is not host[:port]"),
            ("redis+cluster://h:70000", "is not host[:port]"),
            ("redis+cluster://h:1?protocol=resp3", "no query"),
        ] {
            let err = ClusterUrl::parse(bad).unwrap().unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
        let c = RedisConfig {
            url: "redis+cluster://u:s3cret@h:1,/".into(),
            ..RedisConfig::default()
        };
        let err = c.validate().unwrap_err().to_string();
        assert!(
            !err.contains("s3cret") && err.contains("url (unparsable)"),
            "{err}"
        );
        let c = RedisConfig {
            url: "rediss+cluster://h:1,h:2".into(),
            ..RedisConfig::default()
        };
        assert!(c.is_tls());
        let target = c.target().unwrap();
        assert!(target.is_cluster() && target.is_tls() && !target.follows_failovers());
        assert!(c.client().is_err());
    }
}
