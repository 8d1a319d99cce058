//! The node's configuration, composed from each crate's own.
//!
//! Sources, lowest first: defaults, an optional TOML file, environment
//! variables and flags (the last two parsed by `mcp-node`). Values are
//! validated once, by [`NodeConfig::validate`].

use std::net::SocketAddr;
use std::path::PathBuf;

pub use mcp_cluster_auth::AuthConfig;
use mcp_cluster_http::HttpConfig;
pub use mcp_cluster_redis::RedisConfig;
pub use mcp_cluster_runtime::{QuotaConfig, ResponseMode, RuntimeConfig};
use serde::{Deserialize, Serialize};

/// Event log retention, in file-friendly units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Most events kept per SSE stream. Default 10,000.
    pub max_events_per_stream: usize,
    /// Seconds a finished stream stays resumable. Default 300.
    pub closed_stream_ttl_secs: u64,
    /// Seconds an open stream with no new event is kept. Default 3600.
    pub idle_stream_ttl_secs: u64,
    /// Most streams an embedded store holds; beyond it the oldest closed
    /// ones are dropped first. Default 100,000.
    pub max_streams: usize,
    /// Most bytes of events kept per stream; beyond it the oldest events
    /// are dropped (the newest is always kept). Default 32 MiB.
    pub max_stream_bytes: u64,
    /// Bytes of closed streams a node keeps (embedded) or keeps in Redis of
    /// those it closed; beyond it the oldest closed streams of the clients
    /// above their floor are dropped before their TTL, and when only
    /// clients at their floor are left, new requests are refused (503)
    /// instead. Default 64 MiB.
    pub closed_stream_bytes: u64,
    /// The same, per client (the principal, else the client address, of
    /// the request that made the stream; whatever its session): past it
    /// the client's own oldest go. Default 16 MiB. (Named
    /// `closed_stream_bytes_per_session` before it was charged per client;
    /// the old name is still read from files.)
    #[serde(alias = "closed_stream_bytes_per_session")]
    pub closed_stream_bytes_per_client: u64,
    /// Bytes of each client's closed streams that no other client can push
    /// out. Default 4 MiB: 16 clients at their floor fit the default
    /// node budget.
    pub closed_stream_bytes_floor: u64,
    /// Bytes of finished tasks (records, results, answers) a node keeps
    /// (embedded) or keeps in Redis of those it ended; beyond it, as for
    /// closed streams, the oldest of the clients above their floor go, and
    /// new tasks are refused when none is. Default 64 MiB.
    pub finished_task_bytes: u64,
    /// The same, per client (principal, or address without one). Default
    /// 16 MiB.
    pub finished_task_bytes_per_client: u64,
    /// Bytes of each client's finished tasks that no other client can push
    /// out. Default 4 MiB.
    pub finished_task_bytes_floor: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        let r = mcp_cluster_store::memory::Retention::default();
        Self {
            max_events_per_stream: r.max_events_per_stream,
            closed_stream_ttl_secs: r.closed_stream_ttl.as_secs(),
            idle_stream_ttl_secs: r.idle_stream_ttl.as_secs(),
            max_streams: r.max_streams,
            max_stream_bytes: r.max_stream_bytes,
            closed_stream_bytes: r.closed_streams.per_node,
            closed_stream_bytes_per_client: r.closed_streams.per_client,
            closed_stream_bytes_floor: r.closed_streams.floor,
            finished_task_bytes: r.finished_tasks.per_node,
            finished_task_bytes_per_client: r.finished_tasks.per_client,
            finished_task_bytes_floor: r.finished_tasks.floor,
        }
    }
}

impl RetentionConfig {
    /// As the embedded store's type.
    pub fn to_retention(&self) -> mcp_cluster_store::memory::Retention {
        mcp_cluster_store::memory::Retention {
            max_events_per_stream: self.max_events_per_stream,
            closed_stream_ttl: std::time::Duration::from_secs(self.closed_stream_ttl_secs),
            idle_stream_ttl: std::time::Duration::from_secs(self.idle_stream_ttl_secs),
            max_streams: self.max_streams,
            max_stream_bytes: self.max_stream_bytes,
            closed_streams: mcp_cluster_store::ByteBudget {
                per_node: self.closed_stream_bytes,
                per_client: self.closed_stream_bytes_per_client,
                floor: self.closed_stream_bytes_floor,
            },
            finished_tasks: mcp_cluster_store::ByteBudget {
                per_node: self.finished_task_bytes,
                per_client: self.finished_task_bytes_per_client,
                floor: self.finished_task_bytes_floor,
            },
        }
    }
}

/// The server card (the experimental Server Card extension): public
/// metadata at `<endpoint>/server-card`, listed by the catalog at
/// `/.well-known/ai-catalog.json` (and `/.well-known/mcp/catalog.json`).
/// Absent (the default), neither is served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ServerCardConfig {
    /// The server's name in reverse-DNS form with one `/`
    /// (`com.example/weather`). Required.
    pub name: String,
    /// What the server does, at most 100 characters. Required.
    pub description: String,
    /// A display name, at most 100 characters.
    pub title: Option<String>,
    /// Its version; default the server's own (`serverInfo.version`).
    pub version: Option<String>,
    /// A page about it.
    pub website_url: Option<String>,
    /// The origin clients reach the deployment at (`https://mcp.example.com`):
    /// the card's `remotes` and the catalog's link to the card are made of
    /// it. Without it, the card has no remotes and the catalog holds the
    /// card itself.
    pub public_url: Option<String>,
    /// Lists the server's tools (name, title, description) in the card's
    /// `_meta`. Default false.
    pub publish_tools: bool,
}

impl ServerCardConfig {
    /// Checks the card's rules.
    ///
    /// # Errors
    /// The first rule broken, naming the setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: String| Err(ConfigError(format!("server_card.{what}")));
        let name_ok = self.name.len() >= 3
            && self.name.len() <= 200
            && self.name.split_once('/').is_some_and(|(domain, rest)| {
                !domain.is_empty()
                    && !rest.is_empty()
                    && domain
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
                    && rest
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            });
        if !name_ok {
            return bad(format!(
                "name must be reverse-DNS with one '/' (com.example/weather), not {:?}",
                self.name
            ));
        }
        let chars = |text: &str| text.chars().count();
        if !(1..=100).contains(&chars(&self.description)) {
            return bad("description must be 1 to 100 characters".into());
        }
        if self
            .title
            .as_deref()
            .is_some_and(|t| !(1..=100).contains(&chars(t)))
        {
            return bad("title must be 1 to 100 characters".into());
        }
        if self
            .version
            .as_deref()
            .is_some_and(|v| v.is_empty() || v.len() > 255)
        {
            return bad("version must be 1 to 255 characters".into());
        }
        for (key, value) in [
            ("website_url", &self.website_url),
            ("public_url", &self.public_url),
        ] {
            if let Some(value) = value {
                let parsed = url::Url::parse(value);
                if !parsed.is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host()) {
                    return bad(format!("{key} must be an http or https URL, not {value:?}"));
                }
            }
        }
        Ok(())
    }
}

/// HTTPS on the main listener, for deployments without a proxy that ends
/// TLS in front of the node. The admin listener (`admin_bind`: probes and
/// `/metrics`) stays plain HTTP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain, the node's own certificate first. Required.
    pub cert_file: PathBuf,
    /// PEM private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    /// Required.
    pub key_file: PathBuf,
    /// Seconds between two reads of both files; a changed pair that loads
    /// and matches is served to new handshakes from then on, a bad one is
    /// logged and the previous pair kept. Default 10: a renewed certificate
    /// (cert-manager rewrites a Secret's files well before expiry) is in use
    /// within seconds, for the cost of reading two small files.
    pub reload_interval_secs: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert_file: PathBuf::new(),
            key_file: PathBuf::new(),
            reload_interval_secs: 10,
        }
    }
}

/// Everything a node needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Address to listen on. Default `127.0.0.1:8080`: loopback only.
    pub bind: SocketAddr,
    /// HTTP worker threads; 0 means one per core. Default 0.
    pub workers: usize,
    /// Seconds admitted requests get to finish once a draining node stops
    /// accepting connections (after `drain_delay_secs`), before they are
    /// stopped with -32603. Default 30. A drain takes at most
    /// `drain_delay_secs + drain_grace_secs` plus a few seconds.
    pub drain_grace_secs: u64,
    /// Seconds a draining node goes on serving as usual, its readiness
    /// failing, so that load balancers stop routing to it; then its
    /// listener refuses new connections (which a load balancer retries on
    /// another node) and every answer closes its connection. 0: at once
    /// (a lone node). Default 5: a few readiness probes.
    pub drain_delay_secs: u64,
    /// A second listener for `/healthz`, `/readyz` and `/metrics` only,
    /// not subject to the connection limits of the main one; it has a
    /// small gate of its own (16 connections, 4 per address), inside the
    /// descriptors the node keeps out of the main limit. The probes
    /// are served on the main listener too, always; `/metrics` is then
    /// served here only (the main listener answers it 404), so that the
    /// public port does not show the node's internals. Default none:
    /// everything on the main listener.
    pub admin_bind: Option<SocketAddr>,
    /// Items per page of every list method (`tools/list`, `resources/list`,
    /// `resources/templates/list`, `prompts/list`). Default 100: one page
    /// for most servers, a bounded answer for large catalogues.
    pub page_size: usize,
    /// HTTP transport settings.
    pub http: HttpConfig,
    /// Runtime settings.
    pub runtime: RuntimeConfig,
    /// Event log retention (embedded and Redis stores alike).
    pub retention: RetentionConfig,
    /// Quotas per client address and per principal, cluster-wide with
    /// Redis (`[quotas]`; who the client is behind proxies:
    /// `http.trusted_proxies`).
    pub quotas: QuotaConfig,
    /// The Redis store: present, the node joins the cluster sharing it;
    /// absent, the node runs alone on the embedded store.
    pub redis: Option<RedisConfig>,
    /// OAuth 2.1 resource server: present, every request to the MCP
    /// endpoints needs a valid bearer token. Default none (loopback
    /// development); a node listening beyond loopback without it says so
    /// loudly at start.
    pub auth: Option<AuthConfig>,
    /// HTTPS on the main listener: present, the node serves TLS itself;
    /// absent (the default), plain HTTP (behind a proxy that ends TLS, or
    /// on loopback).
    pub tls: Option<TlsConfig>,
    /// MCP servers hosted by the node (`[[upstreams]]`): with one, the node
    /// serves it at its endpoint, a child process per session, in place of
    /// the binary's own server; with several, all of them behind the one
    /// endpoint (a federation). Default none.
    pub upstreams: Vec<mcp_cluster_relay::UpstreamConfig>,
    /// Between an upstream's name and the names of its tools and prompts,
    /// in a federation (`{upstream}{separator}{tool}`): one to four of
    /// `_`, `-` and `.`. Default `_`.
    pub upstream_separator: String,
    /// A folder of skills (the Skills extension): each folder under it
    /// holding a `SKILL.md` is served as a skill, beside the server's own.
    /// Read once at start; a skill that breaks a rule stops the start.
    /// Default none.
    pub skills_dir: Option<PathBuf>,
    /// The server card and its catalog (`[server_card]`). Default none.
    pub server_card: Option<ServerCardConfig>,
    /// The audit trail (`[audit]`): present, one JSON line per request
    /// handled, to stdout or a file. Default none.
    pub audit: Option<mcp_cluster_telemetry::audit::AuditConfig>,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            workers: 0,
            drain_grace_secs: 30,
            drain_delay_secs: 5,
            admin_bind: None,
            page_size: crate::server::DEFAULT_PAGE_SIZE,
            http: HttpConfig::default(),
            runtime: RuntimeConfig::default(),
            retention: RetentionConfig::default(),
            quotas: QuotaConfig::default(),
            redis: None,
            auth: None,
            tls: None,
            upstreams: Vec::new(),
            upstream_separator: "_".to_owned(),
            skills_dir: None,
            server_card: None,
            audit: None,
        }
    }
}

/// The prefix of every variable the node reads.
const ENV_PREFIX: &str = "MCP_";

/// An `MCP_*` environment variable that names neither a flag's variable nor
/// a setting: ignored, and reported by whoever read the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVar {
    /// The variable's name.
    pub name: String,
    /// The closest known name, when one is close enough to be a typo of it.
    pub suggestion: Option<String>,
}

impl std::fmt::Display for UnknownVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} names no setting", self.name)?;
        match &self.suggestion {
            Some(known) => write!(f, " (did you mean {known}?)"),
            None => Ok(()),
        }
    }
}

/// Every setting, as a TOML tree: the defaults, with the optional settings
/// present (TOML has no null: an absent option would hide its key).
/// Options added to [`NodeConfig`] belong here too.
fn skeleton() -> Result<toml::Value, ConfigError> {
    let every = NodeConfig {
        admin_bind: Some(NodeConfig::default().bind),
        skills_dir: Some(PathBuf::new()),
        server_card: Some(ServerCardConfig {
            title: Some(String::new()),
            version: Some(String::new()),
            website_url: Some(String::new()),
            public_url: Some(String::new()),
            ..ServerCardConfig::default()
        }),
        redis: Some(RedisConfig {
            password_file: Some(PathBuf::new()),
            ca_file: Some(PathBuf::new()),
            client_cert_file: Some(PathBuf::new()),
            client_key_file: Some(PathBuf::new()),
            replica_acks: Some(0),
            ..RedisConfig::default()
        }),
        tls: Some(TlsConfig::default()),
        audit: Some(mcp_cluster_telemetry::audit::AuditConfig::default()),
        auth: Some(AuthConfig {
            ca_file: Some(Default::default()),
            resource_name: Some(String::new()),
            resource_documentation: Some(String::new()),
            introspection: Some(mcp_cluster_auth::IntrospectionConfig {
                endpoint: Some(String::new()),
                client_secret: Some(Default::default()),
                client_secret_file: Some(Default::default()),
                reserved_calls_per_second: Some(0),
                ..mcp_cluster_auth::IntrospectionConfig::default()
            }),
            ..AuthConfig::default()
        }),
        ..NodeConfig::default()
    };
    toml::Value::try_from(&every).map_err(|err| ConfigError(err.to_string()))
}

/// The setting path an `MCP_*` name spells: `MCP__KEY` a top-level key,
/// `MCP_SECTION__KEY` a key of a section; lowercase, as in the file. `None`
/// when it spells none (no `__`).
fn setting_path(name: &str) -> Option<Vec<String>> {
    let path = match name.strip_prefix("MCP__") {
        Some(top) => top,
        None => name.strip_prefix(ENV_PREFIX).filter(|p| p.contains("__"))?,
    };
    let keys: Vec<String> = path
        .split("__")
        .filter(|k| !k.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    (!keys.is_empty()).then_some(keys)
}

/// The value at `path` in `tree`, when that is a setting (not a section).
fn setting<'a>(tree: &'a toml::Value, path: &[String]) -> Option<&'a toml::Value> {
    let value = path
        .iter()
        .try_fold(tree, |table, key| table.as_table()?.get(key.as_str()))?;
    (!value.is_table()).then_some(value)
}

/// Every variable name the node knows: the flags' variables, and the
/// `MCP_SECTION__KEY` / `MCP__KEY` name of every setting.
fn known_names(skeleton: &toml::Value, flag_vars: &[&str]) -> Vec<String> {
    fn walk(table: &toml::Table, path: &mut Vec<String>, names: &mut Vec<String>) {
        for (key, value) in table {
            path.push(key.to_ascii_uppercase());
            match value {
                toml::Value::Table(inner) => walk(inner, path, names),
                _ if path.len() == 1 => names.push(format!("MCP__{}", path[0])),
                _ => names.push(format!("{ENV_PREFIX}{}", path.join("__"))),
            }
            path.pop();
        }
    }
    let mut names: Vec<String> = flag_vars.iter().map(|&name| name.to_owned()).collect();
    if let Some(table) = skeleton.as_table() {
        walk(table, &mut Vec::new(), &mut names);
    }
    names
}

/// The known name closest to `name`, when it is close enough to be a typo
/// of it: at most 2 edits, or one in six characters for long names.
fn closest(name: &str, known: &[String]) -> Option<String> {
    let limit = (name.len() / 6).max(2);
    known
        .iter()
        .map(|candidate| (edit_distance(name, candidate), candidate))
        .filter(|(distance, _)| *distance <= limit)
        .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)))
        .map(|(_, candidate)| candidate.clone())
}

/// Levenshtein distance in bytes (variable names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.as_bytes().iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// A TOML error on one line, with the line and column it points at
/// (toml's own rendering spans several lines, with a snippet of the file).
fn toml_error(text: &str, err: &toml::de::Error) -> String {
    let message = without_quoted_strings(err.message())
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match err.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// A deserializer's message without the text values it quotes: serde names
/// a string it could not take as `string "…"`, and that string may be a
/// secret set where another type was expected (`request_state_keys =
/// "k1:…"` for a list). The message keeps the kind (`invalid type: string,
/// expected a sequence`); the line and column say where.
fn without_quoted_strings(message: &str) -> String {
    const QUOTED: &str = "string \"";
    let mut kept = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find(QUOTED) {
        kept.push_str(&rest[..start]);
        kept.push_str("string");
        let quoted = &rest[start + QUOTED.len()..];
        // The closing quote is the first one no backslash escapes.
        let mut escaped = false;
        let end = quoted
            .char_indices()
            .find(|&(_, c)| {
                let closing = c == '"' && !escaped;
                escaped = c == '\\' && !escaped;
                closing
            })
            .map_or(quoted.len(), |(at, _)| at + 1);
        rest = &quoted[end..];
    }
    kept.push_str(rest);
    kept
}

/// Whether `raw` spells a boolean, generously: `true`/`false`, `1`/`0`,
/// `yes`/`no`, `on`/`off` (any case), as the flags' variables accept.
fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" | "on" | "t" => Some(true),
        "false" | "0" | "no" | "n" | "off" | "f" => Some(false),
        _ => None,
    }
}

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl NodeConfig {
    /// Reads a TOML file over the defaults.
    ///
    /// # Errors
    /// The file cannot be read or does not parse.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|err| ConfigError(toml_error(text, &err)))
    }

    /// Reads the optional TOML file over the defaults, then applies
    /// `MCP_<SECTION>__<KEY>` variables over it,
    /// e.g. `MCP_HTTP__MAX_BODY_BYTES=1048576` or
    /// `MCP_RUNTIME__RESPONSE_MODE=sse`; a top-level key has no section
    /// (`MCP__DRAIN_GRACE_SECS`). Values are TOML scalars, or text;
    /// comma-separated for lists, or a JSON array (the only form for a
    /// list of tables: `MCP__UPSTREAMS='[{"name": "everything", "command":
    /// ["node", "server.js", "stdio"]}]'`).
    ///
    /// `flag_vars` are the variables of the caller's flags (`MCP_BIND`),
    /// which it reads itself. Every other `MCP_*` variable that names no
    /// setting is ignored and returned, with the closest known name when
    /// one is close, for the caller to report: an environment is shared
    /// across versions and with other programs, so an unknown name must not
    /// stop a node (see the README, "Flags and environment variables").
    /// Variables without the `MCP_` prefix are not looked at.
    ///
    /// The file and the variables are merged as TOML trees and turned into
    /// a configuration once: a configuration is never serialized back
    /// (its secrets serialize as `"<redacted>"`).
    ///
    /// # Errors
    /// The file does not parse, or a variable names a setting but holds a
    /// value of the wrong type.
    pub fn load(
        file: Option<&str>,
        vars: impl IntoIterator<Item = (String, String)>,
        flag_vars: &[&str],
    ) -> Result<(Self, Vec<UnknownVar>), ConfigError> {
        let mut tree = match file {
            Some(text) => {
                // Parsed as a configuration first, for errors that name the
                // line and the setting.
                Self::from_toml(text)?;
                toml::Value::Table(
                    toml::from_str::<toml::Table>(text)
                        .map_err(|err| ConfigError(toml_error(text, &err)))?,
                )
            }
            None => toml::Value::Table(toml::Table::new()),
        };
        let skeleton = skeleton()?;
        let mut settings = Vec::new();
        let mut unknown = Vec::new();
        for (name, raw) in vars {
            if !name.starts_with(ENV_PREFIX) || flag_vars.contains(&name.as_str()) {
                continue;
            }
            match setting_path(&name).filter(|path| setting(&skeleton, path).is_some()) {
                Some(path) => settings.push((name, path, raw)),
                None => unknown.push(name),
            }
        }
        let unknown = if unknown.is_empty() {
            Vec::new()
        } else {
            let known = known_names(&skeleton, flag_vars);
            unknown
                .into_iter()
                .map(|name| UnknownVar {
                    suggestion: closest(&name, &known),
                    name,
                })
                .collect()
        };
        // An optional section (`[redis]`, `[auth]`, `[tls]`) that one of
        // its keys names is created below, so that key turns it on, with
        // defaults for the rest.
        let mut applied = Vec::new();
        for (name, path, raw) in settings {
            let Some((leaf, sections)) = path.split_last() else {
                continue;
            };
            // The kind of value the setting takes, from the skeleton: the
            // setting itself may be an absent option here.
            let value = match setting(&skeleton, &path) {
                // A JSON array, for lists of tables (`MCP__UPSTREAMS`) or
                // of values that hold commas.
                Some(toml::Value::Array(_))
                    if raw.trim_start().starts_with('[')
                        && serde_json::from_str::<toml::Value>(&raw).is_ok() =>
                {
                    serde_json::from_str::<toml::Value>(&raw).map_err(|err| {
                        ConfigError(format!("{name}: {raw:?} is not a JSON array: {err}"))
                    })?
                }
                Some(toml::Value::Array(_)) => toml::Value::Array(
                    raw.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(|s| toml::Value::String(s.to_owned()))
                        .collect(),
                ),
                Some(toml::Value::String(_)) => toml::Value::String(raw),
                Some(toml::Value::Boolean(_)) => {
                    toml::Value::Boolean(parse_bool(&raw).ok_or_else(|| {
                        ConfigError(format!(
                            "{name}: {raw:?} is not a boolean (true, false, 1, 0, yes, no, on, off)"
                        ))
                    })?)
                }
                _ => toml::from_str::<toml::Table>(&format!("v = {raw}"))
                    .ok()
                    .and_then(|mut t| t.remove("v"))
                    .ok_or_else(|| ConfigError(format!("{name}: {raw:?} is not a valid value")))?,
            };
            let mut table = &mut tree;
            for section in sections {
                // A nested optional section (`[auth.introspection]`) named
                // by a variable starts empty, with its defaults.
                table = table
                    .as_table_mut()
                    .ok_or_else(|| ConfigError(format!("{name}: not a section")))?
                    .entry(section.as_str())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            }
            table
                .as_table_mut()
                .ok_or_else(|| ConfigError(format!("{name}: not a section")))?
                .insert(leaf.clone(), value.clone());
            applied.push((name, path, value));
        }
        // Only a variable can be wrong here (the file parsed above): name
        // the first one that is wrong on its own.
        let this = tree.try_into().map_err(|err: toml::de::Error| {
            let culprit = applied
                .iter()
                .find(|(_, path, value)| {
                    let mut alone = toml::Table::new();
                    let mut table = &mut alone;
                    let Some((leaf, sections)) = path.split_last() else {
                        return false;
                    };
                    for section in sections {
                        let entry = table
                            .entry(section.as_str())
                            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                        let Some(inner) = entry.as_table_mut() else {
                            return false;
                        };
                        table = inner;
                    }
                    table.insert(leaf.clone(), value.clone());
                    toml::Value::Table(alone).try_into::<Self>().is_err()
                })
                .map_or("the MCP_ variables", |(name, _, _)| name.as_str());
            let message = without_quoted_strings(err.message());
            let message = message.split_whitespace().collect::<Vec<_>>();
            ConfigError(format!("{culprit}: {}", message.join(" ")))
        })?;
        Ok((this, unknown))
    }

    /// The runtime's settings, with the node's `[quotas]`.
    pub fn runtime_config(&self) -> RuntimeConfig {
        RuntimeConfig {
            quotas: self.quotas.clone(),
            ..self.runtime.clone()
        }
    }

    /// Checks values that parse but cannot work.
    ///
    /// # Errors
    /// The first bad value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: &str| Err(ConfigError(what.to_owned()));
        if !self.http.endpoint.starts_with('/') {
            return bad("http.endpoint must start with '/'");
        }
        let h = &self.http;
        if h.request_header_timeout_secs == 0
            || h.request_body_timeout_secs == 0
            || h.keep_alive_secs == 0
        {
            return bad(
                "http.request_header_timeout_secs, request_body_timeout_secs and keep_alive_secs \
                 must be positive",
            );
        }
        if h.sse_write_stall_timeout_secs == 0 {
            // 0 would close every stream whose client is a moment behind;
            // a stream is never left to stall for ever.
            return bad("http.sse_write_stall_timeout_secs must be positive");
        }
        if let Err(err) = h.exempt_networks() {
            return Err(ConfigError(format!("http.connection_limit_exempt: {err}")));
        }
        if let Err(err) = mcp_cluster_http::forwarded::TrustedProxies::from_config(h) {
            return Err(ConfigError(format!("http.trusted_proxies: {err}")));
        }
        self.quotas
            .validate(self.runtime.max_batch_items)
            .map_err(ConfigError)?;
        if let Some(card) = &self.server_card {
            card.validate()?;
        }
        if self.page_size == 0 {
            return bad("page_size must be positive");
        }
        if self.http.max_body_bytes < 1024 {
            return bad("http.max_body_bytes must be at least 1024");
        }
        if self.http.allowed_hosts.is_empty() {
            return bad("http.allowed_hosts must not be empty (use \"*\" to allow any host)");
        }
        if self.runtime.max_sessions == 0 || self.runtime.max_in_flight_per_session == 0 {
            return bad(
                "runtime.max_sessions and runtime.max_in_flight_per_session must be positive",
            );
        }
        let r = &self.runtime;
        if [
            r.max_batch_items,
            r.max_client_info_bytes,
            r.max_client_capabilities_bytes,
            r.max_subscriptions_per_session,
            r.max_uri_bytes,
        ]
        .contains(&0)
        {
            return bad(
                "runtime.max_batch_items, max_client_info_bytes, max_client_capabilities_bytes, \
                 max_subscriptions_per_session and max_uri_bytes must be positive",
            );
        }
        if let Err(err) = mcp_cluster_runtime::stateless::mrtr::configured_keys(&self.runtime) {
            return bad(&format!("runtime.request_state_keys: {err}"));
        }
        if r.request_state_ttl_secs == 0 || r.max_listen_streams == 0 {
            return bad("runtime.request_state_ttl_secs and max_listen_streams must be positive");
        }
        if self.runtime.session_idle_ttl_secs == 0 || self.runtime.request_timeout_secs == 0 {
            return bad(
                "runtime.session_idle_ttl_secs and runtime.request_timeout_secs must be positive",
            );
        }
        if r.blocking_threads == 0 {
            return bad("runtime.blocking_threads must be positive");
        }
        if let Some(audit) = &self.audit
            && (audit.output.is_empty() || audit.queue == 0 || audit.max_file_bytes == 0)
        {
            return bad(
                "audit.output must name stdout or a file, and audit.queue and audit.max_file_bytes be positive",
            );
        }
        let separator = &self.upstream_separator;
        if !(1..=4).contains(&separator.len())
            || !separator.bytes().all(|b| matches!(b, b'_' | b'-' | b'.'))
        {
            return bad("upstream_separator must be one to four of _, - and .");
        }
        for upstream in &self.upstreams {
            if upstream.token_exchange.is_some() && self.auth.is_none() {
                return Err(ConfigError(format!(
                    "[[upstreams]] upstream {:?}: token_exchange exchanges the caller's access token, which needs [auth] (the node's own authorization) on",
                    upstream.name
                )));
            }
            upstream
                .validate()
                .map_err(|err| ConfigError(format!("[[upstreams]] {err}")))?;
        }
        if self.retention.max_events_per_stream == 0 || self.retention.max_streams == 0 {
            return bad(
                "retention.max_events_per_stream and retention.max_streams must be positive",
            );
        }
        let t = &self.retention;
        if [
            t.max_stream_bytes,
            t.closed_stream_bytes,
            t.closed_stream_bytes_per_client,
            t.finished_task_bytes,
            t.finished_task_bytes_per_client,
            r.max_task_result_bytes,
            r.max_task_answer_bytes,
            r.max_task_answers_bytes,
            r.max_in_flight_bytes,
        ]
        .contains(&0)
        {
            return bad(
                "retention.max_stream_bytes, closed_stream_bytes, closed_stream_bytes_per_client, \
                 finished_task_bytes, finished_task_bytes_per_client and runtime.max_task_result_bytes, \
                 max_task_answer_bytes, max_task_answers_bytes, max_in_flight_bytes must be positive",
            );
        }
        if t.closed_stream_bytes_floor > t.closed_stream_bytes_per_client
            || t.finished_task_bytes_floor > t.finished_task_bytes_per_client
        {
            return bad(
                "retention.closed_stream_bytes_floor and finished_task_bytes_floor must not exceed \
                 the per-client share they protect (closed_stream_bytes_per_client, \
                 finished_task_bytes_per_client)",
            );
        }
        crate::features::check(self)?;
        if let Some(redis) = &self.redis {
            redis
                .validate()
                .map_err(|err| ConfigError(format!("redis: {err}")))?;
        }
        if let Some(tls) = &self.tls {
            if tls.cert_file.as_os_str().is_empty() || tls.key_file.as_os_str().is_empty() {
                return bad("tls.cert_file and tls.key_file must both be set");
            }
            if tls.reload_interval_secs == 0 {
                return bad("tls.reload_interval_secs must be positive");
            }
        }
        if let Some(auth) = &self.auth {
            auth.validate()
                .map_err(|err| ConfigError(err.to_string()))?;
        }
        if self.retention.idle_stream_ttl_secs < self.runtime.session_idle_ttl_secs {
            // The standalone stream is renewed with the session: it must not
            // expire sooner than the session it belongs to.
            return bad(
                "retention.idle_stream_ttl_secs must be at least runtime.session_idle_ttl_secs",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_files_override_them() {
        NodeConfig::default().validate().unwrap();
        let c = NodeConfig::from_toml("bind = \"0.0.0.0:9000\"\n[runtime]\nmax_sessions = 5\n")
            .unwrap();
        assert_eq!(c.bind.port(), 9000);
        assert_eq!(c.runtime.max_sessions, 5);
        assert_eq!(c.http, HttpConfig::default());
        assert!(NodeConfig::from_toml("nonsense = 1").is_err());
        let short_streams =
            NodeConfig::from_toml("[retention]\nidle_stream_ttl_secs = 60\n").unwrap();
        assert!(short_streams.validate().is_err());
    }

    #[test]
    fn a_write_stall_timeout_of_zero_is_refused() {
        assert_eq!(NodeConfig::default().http.sse_write_stall_timeout_secs, 30);
        let c = NodeConfig::from_toml("[http]\nsse_write_stall_timeout_secs = 0\n").unwrap();
        let err = c.validate().unwrap_err();
        assert_eq!(err.0, "http.sse_write_stall_timeout_secs must be positive");
        let c = NodeConfig::from_toml("[http]\nsse_write_stall_timeout_secs = 2\n").unwrap();
        c.validate().unwrap();
    }

    #[test]
    fn a_value_of_the_wrong_type_is_not_quoted_in_the_error() {
        let key = "k1:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTAx";
        let err = NodeConfig::from_toml(&format!("[runtime]\nrequest_state_keys = \"{key}\"\n"))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("c2VjcmV0"), "{err}");
        assert!(
            err.contains("line 2") && err.contains("invalid type: string, expected a sequence"),
            "{err}"
        );
        assert_eq!(
            without_quoted_strings(r#"invalid type: string "a \"b\" c", expected usize"#),
            "invalid type: string, expected usize"
        );
        assert_eq!(
            without_quoted_strings("invalid value: integer `-5`, expected usize"),
            "invalid value: integer `-5`, expected usize"
        );
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Some flags' variables, as `mcp-node` passes them.
    const FLAG_VARS: &[&str] = &["MCP_BIND", "MCP_REDIS_URL", "MCP_MAX_BODY_BYTES", "MCP_LOG"];

    fn overridden(pairs: &[(&str, &str)]) -> Result<(NodeConfig, Vec<UnknownVar>), ConfigError> {
        NodeConfig::load(None, vars(pairs), FLAG_VARS)
    }

    /// A setting whose name says it holds a secret is a `Secret`, so that
    /// it prints and serializes as `"<redacted>"`: adding `api_token:
    /// String` fails here, before the value can reach a log.
    #[test]
    fn every_setting_named_like_a_secret_is_redacted() {
        let mut every = NodeConfig {
            auth: Some(AuthConfig {
                introspection: Some(mcp_cluster_auth::IntrospectionConfig {
                    client_secret: Some("s3cr3t".into()),
                    ..mcp_cluster_auth::IntrospectionConfig::default()
                }),
                ..AuthConfig::default()
            }),
            ..NodeConfig::default()
        };
        every.runtime.request_state_keys = vec!["k1:c2VjcmV0".into()];
        let tree = toml::Value::try_from(&every).unwrap();
        let secret_name = |key: &str| {
            !key.ends_with("_file")
                && [
                    "secret",
                    "password",
                    "token",
                    "_keys",
                    "api_key",
                    "credential",
                ]
                .iter()
                .any(|word| key.contains(word))
        };
        fn walk(value: &toml::Value, path: &str, found: &mut Vec<(String, toml::Value)>) {
            if let toml::Value::Table(table) = value {
                for (key, inner) in table {
                    walk(inner, &format!("{path}.{key}"), found);
                }
            } else {
                found.push((path.to_owned(), value.clone()));
            }
        }
        let mut leaves = Vec::new();
        walk(&tree, "", &mut leaves);
        let secrets: Vec<&(String, toml::Value)> = leaves
            .iter()
            // Text only: `token_cache_entries` is a number.
            .filter(|(_, value)| value.is_str() || value.is_array())
            .filter(|(path, _)| secret_name(path.rsplit('.').next().unwrap_or("")))
            .collect();
        assert!(secrets.len() >= 2, "{secrets:?}");
        for (path, value) in secrets {
            let shown = value.to_string();
            assert!(
                shown.contains("<redacted>")
                    && !shown.contains("s3cr3t")
                    && !shown.contains("c2Vj"),
                "{path} = {shown}: make it a mcp_cluster_telemetry::Secret"
            );
        }
        let printed = format!("{every:?}");
        assert!(
            !printed.contains("s3cr3t") && !printed.contains("c2Vj"),
            "{printed}"
        );
    }

    #[test]
    fn variables_apply_over_the_file_and_keep_its_secrets() {
        let key = "k1:c3RhdGUta2V5LW9uZS1vZi0zMi1ieXRlcy1sb25nISE=";
        let file = format!("[runtime]\nrequest_state_keys = [\"{key}\"]\nmax_sessions = 5\n");
        let (c, _) = NodeConfig::load(
            Some(&file),
            vars(&[
                ("MCP_HTTP__MAX_BODY_BYTES", "2048"),
                ("MCP_HTTP__LEGACY_SSE", "0"),
            ]),
            FLAG_VARS,
        )
        .unwrap();
        assert_eq!(c.runtime.request_state_keys, [key.into()]);
        assert_eq!(c.runtime.max_sessions, 5);
        assert_eq!(c.http.max_body_bytes, 2048);
        assert!(!c.http.legacy_sse);
        assert!(!format!("{c:?}").contains("c3Rh"));
        let err = NodeConfig::load(
            Some("[runtime]\nmax_sessions = \"x\"\n"),
            vars(&[]),
            FLAG_VARS,
        )
        .unwrap_err();
        assert!(err.0.starts_with("line 2, column 16: "), "{err}");
        let err = overridden(&[("MCP_HTTP__LEGACY_SSE", "maybe")]).unwrap_err();
        assert!(err.0.starts_with("MCP_HTTP__LEGACY_SSE: "), "{err}");
    }

    #[test]
    fn env_overrides_reach_nested_settings_and_refuse_bad_values() {
        let (c, unknown) = overridden(&[
            ("MCP_HTTP__MAX_BODY_BYTES", "2048"),
            ("MCP_HTTP__ALLOWED_HOSTS", "a.example:*, b.example"),
            ("MCP_RUNTIME__RESPONSE_MODE", "sse"),
            ("MCP__DRAIN_GRACE_SECS", "5"),
            ("MCP__ADMIN_BIND", "127.0.0.1:9090"),
            ("MCP_BIND", "a flag's variable: read by the flag, not here"),
            ("PATH", "/bin"),
        ])
        .unwrap();
        assert_eq!(unknown, []);
        assert_eq!(c.http.max_body_bytes, 2048);
        assert_eq!(
            c.http.allowed_hosts,
            vec!["a.example:*".to_owned(), "b.example".to_owned()]
        );
        assert_eq!(c.runtime.response_mode, ResponseMode::Sse);
        assert_eq!(c.drain_grace_secs, 5);
        assert_eq!(c.admin_bind, Some(SocketAddr::from(([127, 0, 0, 1], 9090))));
        assert_eq!(c.bind, NodeConfig::default().bind);
        assert!(c.redis.is_none());
        for bad in [
            ("MCP_HTTP__MAX_BODY_BYTES", "big"),
            ("MCP_RUNTIME__RESPONSE_MODE", "sometimes"),
            ("MCP__ADMIN_BIND", "nowhere"),
        ] {
            assert!(overridden(&[bad]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn upstreams_come_from_the_file_or_from_a_json_array_in_a_variable() {
        let file = "[[upstreams]]\nname = \"everything\"\ncommand = [\"npx\", \"-y\", \"x\"]\n";
        let (c, _) = NodeConfig::load(Some(file), vars(&[]), FLAG_VARS).unwrap();
        assert_eq!(c.upstreams.len(), 1);
        assert_eq!(c.upstreams[0].command, ["npx", "-y", "x"]);
        // The variable replaces the file's list, as any variable does.
        let json = r#"[{"name": "py", "command": ["python3", "server.py"], "env": {"A": "b"}, "max_children": 4}]"#;
        let (c, _) =
            NodeConfig::load(Some(file), vars(&[("MCP__UPSTREAMS", json)]), FLAG_VARS).unwrap();
        assert_eq!(c.upstreams.len(), 1);
        assert_eq!(c.upstreams[0].name, "py");
        assert_eq!(c.upstreams[0].env["A"], "b");
        assert_eq!(c.upstreams[0].max_children, 4);
        c.validate().unwrap();
        // A list that is no JSON stays a comma list; bad upstreams are refused.
        let (c, _) = overridden(&[("MCP_HTTP__ALLOWED_HOSTS", "[::1]:*,localhost:*")]).unwrap();
        assert_eq!(c.http.allowed_hosts, ["[::1]:*", "localhost:*"]);
        assert!(
            overridden(&[("MCP__UPSTREAMS", r#"[{"name": "x", "shell": "rm -rf /"}]"#)]).is_err()
        );
        let (two, _) = overridden(&[(
            "MCP__UPSTREAMS",
            r#"[{"name": "a", "command": ["a"]}, {"name": "b", "command": ["b"]}]"#,
        )])
        .unwrap();
        assert_eq!(two.upstreams.len(), 2, "several make a federation");
        two.validate().unwrap();
        let (bad, _) = overridden(&[("MCP__UPSTREAM_SEPARATOR", "::")]).unwrap();
        assert!(bad.validate().unwrap_err().0.contains("upstream_separator"));
        // Token exchange needs the caller's token: the node's auth on.
        let (exchanging, _) = overridden(&[(
            "MCP__UPSTREAMS",
            r#"[{"name": "up", "urls": ["http://127.0.0.1:9/mcp"], "token_exchange": {"token_url": "http://127.0.0.1:9/token", "client_id": "node", "client_secret_file": "/run/secret"}}]"#,
        )])
        .unwrap();
        let refused = exchanging.validate().unwrap_err().0;
        assert!(
            refused.contains("\"up\"") && refused.contains("needs [auth]"),
            "{refused}"
        );
    }

    #[test]
    fn a_redis_key_turns_redis_on_with_defaults_for_the_rest() {
        let (c, _) = overridden(&[("MCP_REDIS__KEY_PREFIX", "blue")]).unwrap();
        let redis = c.redis.unwrap();
        assert_eq!(redis.key_prefix, "blue");
        assert_eq!(redis.url, RedisConfig::default().url);
        // An unknown name in the section does not.
        let (c, unknown) = overridden(&[("MCP_REDIS__NOPE", "1")]).unwrap();
        assert!(c.redis.is_none());
        assert_eq!(unknown.len(), 1);
    }

    #[test]
    fn unknown_env_names_are_reported_with_the_closest_known_one() {
        let (c, unknown) = overridden(&[
            ("MCP_BIDN", "0.0.0.0:1"),
            ("MCP_HTTP_MAX_BODY_BYTES", "2048"),
            ("MCP_HTTP__NOPE", "1"),
            ("MCP_NOPE__X", "1"),
            ("MCP_REDIS__ULR", "redis://elsewhere"),
            ("MCP_HTTP", "a section is not a setting"),
            ("MCP__", "1"),
            ("MCP_PROXY_AUTH_TOKEN", "another program's"),
            ("MCP_RUNTIME__SSE_RETRY_MS", "2000"),
        ])
        .unwrap();
        assert_eq!(c, {
            let mut expected = NodeConfig::default();
            expected.runtime.sse_retry_ms = 2000;
            expected
        });
        let reported: Vec<(&str, Option<&str>)> = unknown
            .iter()
            .map(|u| (u.name.as_str(), u.suggestion.as_deref()))
            .collect();
        assert_eq!(
            reported,
            [
                ("MCP_BIDN", Some("MCP_BIND")),
                ("MCP_HTTP_MAX_BODY_BYTES", Some("MCP_HTTP__MAX_BODY_BYTES")),
                ("MCP_HTTP__NOPE", None),
                ("MCP_NOPE__X", None),
                ("MCP_REDIS__ULR", Some("MCP_REDIS__URL")),
                ("MCP_HTTP", None),
                ("MCP__", None),
                ("MCP_PROXY_AUTH_TOKEN", None),
            ]
        );
        assert_eq!(
            unknown[0].to_string(),
            "MCP_BIDN names no setting (did you mean MCP_BIND?)"
        );
        assert_eq!(unknown[2].to_string(), "MCP_HTTP__NOPE names no setting");
    }

    #[test]
    fn every_setting_of_the_file_has_a_variable() {
        let names = known_names(&skeleton().unwrap(), &[]);
        for name in [
            "MCP__BIND",
            "MCP__ADMIN_BIND",
            "MCP__PAGE_SIZE",
            "MCP_HTTP__ENDPOINT",
            "MCP_RUNTIME__SSE_KEEP_ALIVE_SECS",
            "MCP_RETENTION__MAX_STREAMS",
            "MCP_REDIS__URL",
            "MCP_REDIS__COMMAND_TIMEOUT_MS",
            "MCP_REDIS__REPLICA_ACKS",
            "MCP_REDIS__REPLICA_ACK_TIMEOUT_MS",
            "MCP_REDIS__PASSWORD_FILE",
            "MCP_REDIS__CA_FILE",
            "MCP_REDIS__CLIENT_CERT_FILE",
            "MCP_REDIS__CLIENT_KEY_FILE",
            "MCP_TLS__CERT_FILE",
            "MCP_AUDIT__OUTPUT",
            "MCP_AUDIT__ARGUMENTS",
            "MCP_TLS__KEY_FILE",
            "MCP_TLS__RELOAD_INTERVAL_SECS",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
        }
        // Sections are not settings, and `[redis]` has no retention key.
        assert!(
            !names
                .iter()
                .any(|n| n == "MCP__HTTP" || n.contains("REDIS__RETENTION"))
        );
    }

    #[test]
    fn a_tls_key_turns_tls_on_and_both_files_are_required() {
        let (c, unknown) = overridden(&[
            ("MCP_TLS__CERT_FILE", "/etc/mcp/tls.crt"),
            ("MCP_TLS__KEY_FILE", "/etc/mcp/tls.key"),
        ])
        .unwrap();
        assert_eq!(unknown, []);
        let tls = c.tls.clone().unwrap();
        assert_eq!(tls.cert_file, PathBuf::from("/etc/mcp/tls.crt"));
        assert_eq!(tls.reload_interval_secs, 10);
        c.validate().unwrap();
        let (half, _) = overridden(&[("MCP_TLS__CERT_FILE", "/etc/mcp/tls.crt")]).unwrap();
        let err = half.validate().unwrap_err().to_string();
        assert!(err.contains("tls.cert_file and tls.key_file"), "{err}");
        let file = NodeConfig::from_toml(
            "[tls]\ncert_file = \"a.pem\"\nkey_file = \"a.key\"\nreload_interval_secs = 0\n",
        )
        .unwrap();
        assert!(file.validate().is_err());
        assert!(NodeConfig::from_toml("[tls]\ncert = \"a.pem\"\n").is_err());
    }

    #[test]
    fn redis_tls_files_have_variables_of_their_own() {
        let (c, unknown) = overridden(&[
            ("MCP_REDIS__URL", "rediss://mcp@redis.internal:6380"),
            ("MCP_REDIS__PASSWORD_FILE", "/run/secrets/redis-password"),
            ("MCP_REDIS__CA_FILE", "/etc/mcp/redis-ca.pem"),
        ])
        .unwrap();
        assert_eq!(unknown, []);
        let redis = c.redis.unwrap();
        assert_eq!(redis.ca_file, Some(PathBuf::from("/etc/mcp/redis-ca.pem")));
        assert_eq!(
            redis.password_file,
            Some(PathBuf::from("/run/secrets/redis-password"))
        );
        assert_eq!(redis.client_cert_file, None);
    }

    #[test]
    fn the_introspection_reserve_has_variables_of_its_own() {
        let (c, unknown) = overridden(&[
            ("MCP_AUTH__RESOURCE", "https://mcp.example.com/mcp"),
            ("MCP_AUTH__ISSUERS", "https://idp.example.com"),
            ("MCP_AUTH__INTROSPECTION__CLIENT_ID", "rs"),
            ("MCP_AUTH__INTROSPECTION__CLIENT_SECRET", "s"),
            ("MCP_AUTH__INTROSPECTION__RESERVED_CALLS_PER_SECOND", "20"),
            ("MCP_AUTH__INTROSPECTION__RESERVED_CALLS_PER_ADDRESS", "3"),
            ("MCP_AUTH__INTROSPECTION__NEGATIVE_CACHE_ENTRIES", "500"),
        ])
        .unwrap();
        assert_eq!(unknown, []);
        let introspection = c.auth.as_ref().unwrap().introspection.as_ref().unwrap();
        assert_eq!(introspection.reserved_calls_per_second, Some(20));
        assert_eq!(introspection.reserved_calls_per_address, 3);
        assert_eq!(introspection.negative_cache_entries, 500);
        c.validate().unwrap();
        let (c, _) = overridden(&[
            ("MCP_AUTH__RESOURCE", "https://mcp.example.com/mcp"),
            ("MCP_AUTH__ISSUERS", "https://idp.example.com"),
            ("MCP_AUTH__INTROSPECTION__CLIENT_ID", "rs"),
            ("MCP_AUTH__INTROSPECTION__CLIENT_SECRET", "s"),
            ("MCP_AUTH__INTROSPECTION__RESERVED_CALLS_PER_SECOND", "50"),
        ])
        .unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("reserved_calls_per_second"), "{err}");
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("MCP_BIND", "MCP_BIND"), 0);
        assert_eq!(edit_distance("MCP_BIDN", "MCP_BIND"), 2);
        assert_eq!(edit_distance("MCP_HTTP_X", "MCP_HTTP__X"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn quotas_and_trusted_proxies_come_from_their_section_and_are_checked() {
        let (c, unknown) = overridden(&[
            ("MCP_QUOTAS__SESSIONS_PER_PRINCIPAL", "5"),
            ("MCP_QUOTAS__INITIALIZE_PER_ADDRESS", "0"),
            ("MCP_HTTP__TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.1"),
        ])
        .unwrap();
        assert_eq!(unknown, []);
        assert_eq!(c.quotas.sessions_per_principal, 5);
        assert_eq!(c.quotas.initialize_per_address, 0);
        assert_eq!(c.runtime_config().quotas, c.quotas);
        assert_eq!(c.http.trusted_proxies, ["10.0.0.0/8", "192.0.2.1"]);
        c.validate().unwrap();
        let file = NodeConfig::from_toml("[quotas]\nstreams_per_principal = 7\n").unwrap();
        assert_eq!(file.quotas.streams_per_principal, 7);
        // The runtime's section does not take them.
        assert!(NodeConfig::from_toml("[runtime.quotas]\nstreams_per_principal = 7\n").is_err());
        for bad in [
            "[http]\ntrusted_proxies = [\"proxy.example\"]\n",
            "[quotas]\nrequests_per_principal = 10\n",
            "[quotas]\nstream_lease_secs = 1\n",
        ] {
            let c = NodeConfig::from_toml(bad).unwrap();
            assert!(c.validate().is_err(), "{bad}");
        }
    }
}
