//! [`UpstreamConfig`]: one hosted MCP server (`[[upstreams]]`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use mcp_cluster_runtime::TaskSupport;
use serde::{Deserialize, Serialize};

/// One MCP server the node hosts: a stdio program started once per session,
/// or a Streamable HTTP server (`urls`) with one upstream session per
/// session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The server's name in logs and metrics (`upstream` label):
    /// `[A-Za-z0-9_-]`, 1 to 64 characters.
    pub name: String,
    /// The program and its arguments (argv): run as given, never through a
    /// shell. The program is looked up on the child's `PATH`.
    pub command: Vec<String>,
    /// A Streamable HTTP server instead of a program: its endpoint
    /// (`http://…/mcp`), or one per replica. Each session opens a session
    /// of its own at one of them, in turn, and keeps it: the replicas need
    /// share nothing. Exclusive with `command`.
    pub urls: Vec<String>,
    /// Seconds to connect to an HTTP upstream before its request fails.
    /// Default 5.
    pub connect_timeout_secs: u64,
    /// A file holding the bearer token the node sends an HTTP upstream
    /// (`Authorization: Bearer …` on every request), read again whenever it
    /// changes (a rotated secret). The client's own token never reaches the
    /// upstream.
    pub bearer_token_file: Option<PathBuf>,
    /// OAuth 2.0 client credentials (RFC 6749, 4.4) the node gets its own
    /// token for an HTTP upstream with, from the upstream's authorization
    /// server; kept until shortly before it expires. Exclusive with
    /// `bearer_token_file`.
    pub client_credentials: Option<ClientCredentials>,
    /// RFC 8693 token exchange: each caller's access token is exchanged at
    /// the upstream's authorization server (which trusts the node's
    /// issuer) for a token of the upstream, kept per principal and scopes
    /// until shortly before it expires. Needs the node's authorization on;
    /// exclusive with the other two credentials.
    pub token_exchange: Option<TokenExchange>,
    /// Variables the child gets, on top of those of `inherit_env`. The
    /// child's environment comes from here alone: none of the node's own
    /// variables (its Redis URL, its secrets) reaches it otherwise.
    pub env: BTreeMap<String, String>,
    /// Variables of the node's environment passed on to the child, when
    /// set. Default `PATH`, `HOME`, `LANG`, `TMPDIR`: what interpreters and
    /// package runners (`node`, `npx`, `python`, `uvx`) need to start.
    pub inherit_env: Vec<String>,
    /// The child's working directory. Default: the node's.
    pub cwd: Option<PathBuf>,
    /// Seconds the child gets to answer `initialize`; then it is ended and
    /// the client gets -32603. Default 30: a runtime's cold start, not a
    /// package download (install the server in the image).
    pub initialize_timeout_secs: u64,
    /// The longest line (one JSON-RPC message) read from the child's
    /// stdout, in bytes; a longer one ends the child with an error for its
    /// session. Default 8 MiB.
    pub max_line_bytes: usize,
    /// The longest stderr line logged, in bytes (the rest of the line is
    /// dropped). Default 4 KiB.
    pub stderr_line_bytes: usize,
    /// Stderr lines logged per second per child; the rest are counted and
    /// dropped (stderr is always read, so a chatty child never blocks on
    /// it). Default 20.
    pub stderr_lines_per_sec: u32,
    /// Seconds a child gets to exit after its stdin closes, and again after
    /// SIGTERM, before its process group is killed. Default 5.
    pub end_grace_secs: u64,
    /// The most children this node runs at once; past it, new sessions are
    /// refused. Default 256.
    pub max_children: usize,
    /// The most children one principal has on this node at once (0: no
    /// limit of its own). Default 16.
    pub max_children_per_principal: usize,
    /// Children started per second on this node at most (a burst of as
    /// many is allowed); past it, new sessions are refused. Default 20.
    pub spawns_per_sec: u32,
    /// Whether the server's tools run as tasks for 2026-07-28 clients of the
    /// tasks extension (a session-era stdio server says nothing of it; the
    /// node runs the task and the call within it). Default `forbidden`.
    pub tasks: TaskSupport,
    /// The same, tool by tool (`{ slow_report = "required" }`), over
    /// `tasks`.
    pub tool_tasks: BTreeMap<String, TaskSupport>,
    /// 2026-07-28 requests run on initialized children kept per principal
    /// and client capabilities: at most this many idle per key (more come
    /// back only to be ended). Default 4.
    pub pool_idle_per_key: usize,
    /// Seconds a pooled child waits idle before it is ended. Default 60.
    pub pool_idle_secs: u64,
    /// The server speaks 2026-07-28 itself (its own `server/discover`,
    /// `_meta` per request, `input_required` rounds with its own
    /// `requestState`): 2026-07-28 requests go to it as they come, on
    /// children shared by a principal's requests whatever their client
    /// capabilities, never initialized. Session-era clients still get a
    /// child each, initialized as any. Default `false`: the server is
    /// spoken to in the session era only.
    pub stateless: bool,
    /// Behind a federation (several `[[upstreams]]`): whether the
    /// server's tool and prompt names go out as `{name}{separator}{tool}`
    /// and its resource URIs as `{name}+{uri}`. `false` keeps them as they
    /// are, where the operator knows they meet no other upstream's (a
    /// clash is refused at start). Default `true`; one upstream alone is
    /// never prefixed.
    pub prefix: bool,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            name: String::new(),
            command: Vec::new(),
            urls: Vec::new(),
            connect_timeout_secs: 5,
            bearer_token_file: None,
            client_credentials: None,
            token_exchange: None,
            env: BTreeMap::new(),
            inherit_env: ["PATH", "HOME", "LANG", "TMPDIR"]
                .map(str::to_owned)
                .to_vec(),
            cwd: None,
            initialize_timeout_secs: 30,
            max_line_bytes: 8 * 1024 * 1024,
            stderr_line_bytes: 4096,
            stderr_lines_per_sec: 20,
            end_grace_secs: 5,
            max_children: 256,
            max_children_per_principal: 16,
            spawns_per_sec: 20,
            tasks: TaskSupport::Forbidden,
            tool_tasks: BTreeMap::new(),
            pool_idle_per_key: 4,
            pool_idle_secs: 60,
            stateless: false,
            prefix: true,
        }
    }
}

/// The node's OAuth 2.0 client at an HTTP upstream's authorization server
/// (`[upstreams.client_credentials]`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientCredentials {
    /// The token endpoint (`https://`; `http://` on loopback only).
    pub token_url: String,
    /// The node's client id there.
    pub client_id: String,
    /// A file holding the client's secret (sent with HTTP Basic), read
    /// again whenever it changes.
    pub client_secret_file: PathBuf,
    /// The scopes to ask for, space-separated; none by default.
    pub scope: Option<String>,
    /// The upstream's resource URI (RFC 8707 `resource`), which the
    /// token's audience names; none by default.
    pub resource: Option<String>,
}

/// The node's OAuth 2.0 client at an HTTP upstream's authorization server
/// for RFC 8693 token exchange (`[upstreams.token_exchange]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenExchange {
    /// The token endpoint (`https://`; `http://` on loopback only).
    pub token_url: String,
    /// The node's client id there.
    pub client_id: String,
    /// A file holding the client's secret (sent with HTTP Basic), read
    /// again whenever it changes.
    pub client_secret_file: PathBuf,
    /// The upstream's resource URI (RFC 8707 `resource`): the exchanged
    /// token's audience. Default: none (the authorization server decides).
    pub resource: Option<String>,
    /// The logical name of the upstream (RFC 8693 `audience`); none by
    /// default.
    pub audience: Option<String>,
    /// The scopes to ask for, space-separated; none by default (those the
    /// authorization server grants).
    pub scope: Option<String>,
    /// The most exchanged tokens this node keeps at once, one per
    /// principal and scopes (those expired go first, then those expiring
    /// soonest). Default 10,000.
    pub max_principals: usize,
}

impl Default for TokenExchange {
    fn default() -> Self {
        Self {
            token_url: String::new(),
            client_id: String::new(),
            client_secret_file: PathBuf::new(),
            resource: None,
            audience: None,
            scope: None,
            max_principals: 10_000,
        }
    }
}

/// A configuration the relay refuses, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("upstream {name:?}: {problem}")]
pub struct UpstreamConfigError {
    /// The upstream's name as configured.
    pub name: String,
    /// What is wrong.
    pub problem: String,
}

impl UpstreamConfig {
    /// An upstream running `command`, with the defaults otherwise.
    pub fn new(name: &str, command: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            ..Self::default()
        }
    }

    /// Checks the settings once, at start.
    ///
    /// # Errors
    /// The first setting that cannot work.
    pub fn validate(&self) -> Result<(), UpstreamConfigError> {
        let fail = |problem: &str| {
            Err(UpstreamConfigError {
                name: self.name.clone(),
                problem: problem.to_owned(),
            })
        };
        let name_ok = (1..=64).contains(&self.name.len())
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return fail("name must be 1 to 64 of A-Z, a-z, 0-9, - and _");
        }
        match (self.command.is_empty(), self.urls.is_empty()) {
            (false, false) => {
                return fail("give command (a stdio server) or urls (an HTTP server), not both");
            }
            (true, true) => {
                return fail(
                    "command must name a program (an argv array, never a shell line), or urls an HTTP server",
                );
            }
            _ => {}
        }
        if !self.command.is_empty() && self.command[0].is_empty() {
            return fail("command must name a program (an argv array, never a shell line)");
        }
        if let Some(url) = self.urls.iter().find(|u| !is_http_url(u)) {
            return fail(&format!(
                "urls: {url:?} is not an http:// or https:// URL with a host"
            ));
        }
        let credentials = [
            self.bearer_token_file.is_some(),
            self.client_credentials.is_some(),
            self.token_exchange.is_some(),
        ];
        if credentials.iter().filter(|given| **given).count() > 1 {
            return fail(
                "give one of bearer_token_file, client_credentials and token_exchange, not both",
            );
        }
        if self.urls.is_empty() && credentials.contains(&true) {
            return fail(
                "bearer_token_file, client_credentials and token_exchange are for an HTTP server (urls)",
            );
        }
        if let Some(path) = &self.bearer_token_file
            && let Err(problem) = crate::http::TokenFile::open(path)
        {
            return fail(&format!("bearer_token_file {problem}"));
        }
        if let Some(client) = &self.client_credentials {
            check_client(
                "client_credentials",
                &client.token_url,
                &client.client_id,
                &client.client_secret_file,
            )
            .or_else(|problem| fail(&problem))?;
        }
        if let Some(exchange) = &self.token_exchange {
            check_client(
                "token_exchange",
                &exchange.token_url,
                &exchange.client_id,
                &exchange.client_secret_file,
            )
            .or_else(|problem| fail(&problem))?;
            if exchange.max_principals == 0 {
                return fail("token_exchange.max_principals must be at least 1");
            }
        }
        if self.connect_timeout_secs == 0 {
            return fail("connect_timeout_secs must be at least 1");
        }
        if self
            .env
            .keys()
            .chain(&self.inherit_env)
            .any(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return fail("environment variable names must be non-empty, without = or NUL");
        }
        if self.max_line_bytes < 1024 {
            return fail("max_line_bytes must be at least 1024");
        }
        if self.stderr_line_bytes == 0 {
            return fail("stderr_line_bytes must be at least 1");
        }
        if self.initialize_timeout_secs == 0 {
            return fail("initialize_timeout_secs must be at least 1");
        }
        if self.max_children == 0 {
            return fail("max_children must be at least 1");
        }
        if self.spawns_per_sec == 0 {
            return fail("spawns_per_sec must be at least 1");
        }
        Ok(())
    }

    /// An HTTP server (`urls`), not a program.
    pub(crate) fn is_http(&self) -> bool {
        !self.urls.is_empty()
    }

    pub(crate) fn initialize_timeout(&self) -> Duration {
        Duration::from_secs(self.initialize_timeout_secs)
    }

    /// Whether tool `name` runs as a task ([`Self::tasks`], [`Self::tool_tasks`]).
    pub(crate) fn tasks_of(&self, name: &str) -> TaskSupport {
        self.tool_tasks.get(name).copied().unwrap_or(self.tasks)
    }

    pub(crate) fn pool_idle(&self) -> Duration {
        Duration::from_secs(self.pool_idle_secs)
    }

    pub(crate) fn end_grace(&self) -> Duration {
        Duration::from_secs(self.end_grace_secs)
    }
}

/// `http://host…` or `https://host…`.
/// Checks the node's client at an authorization server (`what`: its
/// table's name).
fn check_client(
    what: &str,
    token_url: &str,
    client_id: &str,
    secret_file: &std::path::Path,
) -> Result<(), String> {
    let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
        .iter()
        .any(|p| token_url.starts_with(p));
    if !(token_url.starts_with("https://") || loopback) || !is_http_url(token_url) {
        return Err(format!(
            "{what}.token_url must be an https:// URL (http:// on loopback only)"
        ));
    }
    if client_id.is_empty() {
        return Err(format!("{what}.client_id must be set"));
    }
    crate::http::TokenFile::open(secret_file)
        .map(drop)
        .map_err(|problem| format!("{what}.client_secret_file {problem}"))
}

fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or_default();
        !host.is_empty() && !host.contains(char::is_whitespace)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_without_a_program_or_a_good_name_is_refused() {
        assert!(
            UpstreamConfig::new("everything", &["npx", "x"])
                .validate()
                .is_ok()
        );
        let no_program = UpstreamConfig::new("everything", &[]);
        assert!(
            no_program
                .validate()
                .unwrap_err()
                .problem
                .contains("program")
        );
        let bad_name = UpstreamConfig::new("every thing", &["x"]);
        assert!(bad_name.validate().unwrap_err().problem.contains("name"));
        let mut bad_env = UpstreamConfig::new("e", &["x"]);
        bad_env.env.insert("A=B".into(), "c".into());
        assert!(bad_env.validate().is_err());
        let mut both = UpstreamConfig::new("e", &["x"]);
        both.urls = vec!["http://127.0.0.1:1/mcp".into()];
        assert!(both.validate().unwrap_err().problem.contains("not both"));
        let mut http = UpstreamConfig::new("e", &[]);
        http.urls = vec![
            "http://127.0.0.1:1/mcp".into(),
            "https://a.example/mcp".into(),
        ];
        assert!(http.validate().is_ok());
        let mut token_for_a_program = UpstreamConfig::new("e", &["x"]);
        token_for_a_program.bearer_token_file = Some("/run/token".into());
        assert!(
            token_for_a_program
                .validate()
                .unwrap_err()
                .problem
                .contains("bearer_token_file")
        );
        let mut client = http.clone();
        client.client_credentials = Some(ClientCredentials {
            token_url: "http://idp.example.com/token".into(),
            client_id: "node".into(),
            client_secret_file: "/nonexistent/secret".into(),
            ..ClientCredentials::default()
        });
        assert!(client.validate().unwrap_err().problem.contains("https://"));
        client.client_credentials.as_mut().unwrap().token_url =
            "https://idp.example.com/token".into();
        assert!(
            client
                .validate()
                .unwrap_err()
                .problem
                .contains("client_secret_file /nonexistent/secret")
        );
        client.bearer_token_file = Some("/run/token".into());
        assert!(client.validate().unwrap_err().problem.contains("not both"));
        http.urls.push("ftp://x/mcp".into());
        assert!(http.validate().unwrap_err().problem.contains("ftp://x/mcp"));
        let mut tiny_lines = UpstreamConfig::new("e", &["x"]);
        tiny_lines.max_line_bytes = 10;
        assert!(tiny_lines.validate().is_err());
    }

    #[test]
    fn an_upstream_reads_from_toml_with_defaults() {
        let text = r#"
            name = "everything"
            command = ["npx", "-y", "@modelcontextprotocol/server-everything", "stdio"]
            env = { API_BASE = "http://127.0.0.1:9" }
        "#;
        let optional: UpstreamConfig =
            toml::from_str(&format!("{text}\ntasks = \"optional\"")).unwrap();
        assert_eq!(optional.tasks, TaskSupport::Optional);
        let per_tool: UpstreamConfig = toml::from_str(&format!(
            "{text}\ntasks = \"optional\"\ntool_tasks = {{ quick = \"forbidden\" }}"
        ))
        .unwrap();
        assert_eq!(per_tool.tasks_of("quick"), TaskSupport::Forbidden);
        assert_eq!(per_tool.tasks_of("slow"), TaskSupport::Optional);
        assert!(toml::from_str::<UpstreamConfig>(&format!("{text}\ntasks = \"often\"")).is_err());
        let config: UpstreamConfig = toml::from_str(text).unwrap();
        assert_eq!(config.tasks, TaskSupport::Forbidden);
        assert_eq!(config.command.len(), 4);
        assert_eq!(config.env["API_BASE"], "http://127.0.0.1:9");
        assert_eq!(config.max_line_bytes, 8 * 1024 * 1024);
        assert!(config.inherit_env.contains(&"PATH".to_owned()));
    }
}
