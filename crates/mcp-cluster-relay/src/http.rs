//! The conversation with one session of a Streamable HTTP upstream
//! (`urls`): what [`Upstream`] writes for a stdio child's stdin is sent
//! here over HTTP instead, and what the server answers comes back through
//! [`Upstream::received`], as a child's stdout would.
//!
//! - `initialize` first, alone: its answer carries the upstream session's
//!   `Mcp-Session-Id` and the revision every later request names in
//!   `MCP-Protocol-Version`.
//! - Each request after it is POSTed on a task of its own (a long call never
//!   holds up the next); its answer comes as JSON or as an SSE stream,
//!   which is resumed with `Last-Event-ID` when it breaks before the answer
//!   ([`RESUMES`] times at most). Notifications and answers to the server's
//!   own requests are POSTed in order.
//! - Once `notifications/initialized` went out, the session's GET stream
//!   carries what the server says outside any request; it is opened again
//!   (with `Last-Event-ID`) whenever it ends, unless the server has none
//!   (405).
//! - A 404 from the upstream (its session is gone), or a connection its
//!   replica's address refuses (nothing listens there: the process that
//!   kept the session in its memory is gone), ends the conversation, and
//!   with it the client's session; so does [`Upstream::end`], which
//!   DELETEs the upstream session. A timeout or a broken connection fails
//!   only the request it hit.
//!
//! Bounded: no body or event over `max_line_bytes` is read (the request it
//! belongs to fails); the tasks are the conversation's and end with it.
//!
//! [`Replicas`]: a session opens at the next replica in turn, skipping one
//! that could not be reached in the last [`DOWN_FOR`] (passive health,
//! `mcp_upstream_replica_up`); an `initialize` that cannot reach its
//! replica tries the next, as nothing was opened there.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mcp_cluster_client::{Client, Reply, SseStream, session_id_of};
use mcp_cluster_protocol::ProtocolVersion;
use mcp_cluster_protocol::methods::{self, meta};
use mcp_cluster_runtime::CallerToken;
use mcp_cluster_telemetry::Secret;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinSet;

use crate::metrics;
use crate::upstream::Upstream;

/// Times a broken response stream is resumed before its request fails.
const RESUMES: u32 = 5;
/// Pause before a resumption, or before the GET stream is opened again,
/// when the server named none (`retry`).
const RETRY_DEFAULT: Duration = Duration::from_secs(1);
/// Longest such pause.
const RETRY_MAX: Duration = Duration::from_secs(10);
/// How long a replica that could not be reached is skipped by new
/// sessions.
pub(crate) const DOWN_FOR: Duration = Duration::from_secs(5);

/// An HTTP upstream's replicas, their connection pool, and which are up.
#[derive(Debug)]
pub(crate) struct Replicas {
    upstream: String,
    urls: Vec<String>,
    pool: reqwest::Client,
    next: AtomicUsize,
    /// Per replica: skipped until then (ms since the epoch), 0 when up.
    down_until: Vec<AtomicU64>,
    /// The node's own credential for the upstream.
    credential: Option<Arc<Credential>>,
    /// Or: the caller's token exchanged for one of the upstream's.
    exchanger: Option<Arc<TokenExchanger>>,
    /// The arguments each tool mirrors into `Mcp-Param-*` headers, as the
    /// relay learnt them from the server's lists (2026-07-28 requests
    /// carry them).
    mirrors: Mirrors,
}

/// The arguments each tool of an upstream mirrors into headers, by tool.
pub(crate) type Mirrors =
    Arc<std::sync::Mutex<HashMap<String, Vec<mcp_cluster_runtime::MirroredParam>>>>;

/// What the node sends an HTTP upstream as `Authorization: Bearer`.
#[derive(Debug)]
pub(crate) enum Credential {
    /// `bearer_token_file`.
    File(TokenFile),
    /// `client_credentials`: tokens from the upstream's authorization
    /// server.
    Client(Box<ClientCredentials>),
    /// `token_exchange`: the caller's token exchanged for one of the
    /// upstream's (one session's, of one principal).
    Exchange(ExchangeFor),
}

impl Credential {
    /// Makes sure a token is at hand for the next request (a client's or
    /// an exchanged one is got again shortly before it expires).
    async fn prepare(&self) -> Result<(), String> {
        match self {
            Self::File(_) => Ok(()),
            Self::Client(client) => client.fresh().await,
            Self::Exchange(exchange) => exchange.fresh().await,
        }
    }

    /// The token to send now.
    fn token(&self) -> Option<String> {
        match self {
            Self::File(file) => Some(file.token()),
            Self::Client(client) => client.current(),
            Self::Exchange(exchange) => exchange.current(),
        }
    }

    /// Whether it is the caller's token exchanged.
    pub(crate) fn exchanges(&self) -> bool {
        matches!(self, Self::Exchange(_))
    }

    /// The caller's token and scopes, as a request brings them (kept for
    /// the next exchange of a `token_exchange` credential, ignored
    /// otherwise).
    pub(crate) fn offer(&self, who: &Who) {
        if let (Self::Exchange(exchange), Some(token)) = (self, &who.token)
            && let Ok(mut held) = exchange.caller.lock()
            && held.0.as_ref() != Some(token)
        {
            *held = (
                Some(token.clone()),
                ExchangeFor::key(&exchange.principal, &who.scopes),
            );
        }
    }
}

/// A token got again this long before it expires.
const TOKEN_MARGIN: Duration = Duration::from_secs(30);

/// The grant of RFC 8693 token exchange.
const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 section 3: the type of the caller's token and of the one asked
/// for.
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// A token an authorization server issued, and how long it lasts.
struct Issued {
    token: Secret,
    lifetime: Duration,
}

/// The node's client at an upstream's authorization server: its token
/// endpoint, client id and secret (HTTP Basic), read again when its file
/// changes. Neither the secret nor a token it gets is ever logged.
#[derive(Debug)]
struct TokenEndpoint {
    upstream: String,
    token_url: String,
    client_id: String,
    secret: TokenFile,
    http: reqwest::Client,
}

impl TokenEndpoint {
    /// # Errors
    /// The secret's file cannot be read (`what`: its table, for the
    /// message).
    fn new(
        what: &str,
        upstream: &str,
        (token_url, client_id, secret_file): (&str, &str, &std::path::Path),
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        let secret = TokenFile::open(secret_file)
            .map_err(|why| format!("{what}.client_secret_file {why}"))?;
        Ok(Self {
            upstream: upstream.to_owned(),
            token_url: token_url.to_owned(),
            client_id: client_id.to_owned(),
            secret,
            http: reqwest::Client::builder()
                .connect_timeout(connect_timeout)
                .timeout(RETRY_MAX)
                .build()
                .unwrap_or_default(),
        })
    }

    /// POSTs `form`: the token the endpoint answers (RFC 6749 section
    /// 5.1), or why there is none (never the secret or a token). `grant`:
    /// the grant's label in `mcp_upstream_token_requests_total`.
    async fn request(&self, grant: &'static str, form: &[(&str, &str)]) -> Result<Issued, String> {
        let upstream = &self.upstream;
        let answer = self
            .http
            .post(&self.token_url)
            .basic_auth(&self.client_id, Some(self.secret.token()))
            .header("Accept", "application/json")
            .form(form)
            .send()
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(err) => {
                metrics::token_request(upstream, grant, "unreachable");
                return Err(format!("its token endpoint could not be reached ({err})"));
            }
        };
        let status = answer.status();
        let answer: Value = match read_bounded(answer, MAX_TOKEN_ANSWER_BYTES).await {
            Some(body) => serde_json::from_slice(&body).unwrap_or(Value::Null),
            None => Value::Null,
        };
        if !answer.is_object() {
            metrics::token_request(upstream, grant, "refused");
            return Err(format!(
                "its token endpoint answered HTTP {status}, not a token (or one over {MAX_TOKEN_ANSWER_BYTES} bytes)"
            ));
        }
        let Some(token) = answer["access_token"]
            .as_str()
            .filter(|t| status.is_success() && !t.is_empty() && t.len() as u64 <= MAX_TOKEN_BYTES)
        else {
            metrics::token_request(upstream, grant, "refused");
            let error = answer["error"].as_str().unwrap_or("no access_token");
            return Err(format!(
                "its token endpoint refused the node's client ({status}, {error})"
            ));
        };
        metrics::token_request(upstream, grant, "ok");
        Ok(Issued {
            token: Secret::new(token),
            lifetime: Duration::from_secs(answer["expires_in"].as_u64().unwrap_or(3600)),
        })
    }
}

/// The largest answer of a token endpoint read.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

/// `answer`'s body, unless it is over `max` bytes (or breaks).
async fn read_bounded(mut answer: reqwest::Response, max: usize) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = answer.chunk().await.ok()? {
        if body.len() + chunk.len() > max {
            return None;
        }
        body.extend_from_slice(&chunk);
    }
    Some(body)
}

/// The node's OAuth 2.0 client (client credentials grant) at an upstream's
/// authorization server: one token at a time, got again shortly before it
/// expires. Neither the secret nor a token is ever logged.
#[derive(Debug)]
pub(crate) struct ClientCredentials {
    config: crate::config::ClientCredentials,
    endpoint: TokenEndpoint,
    /// The token and when it is to be got again; one request for it at a
    /// time.
    held: tokio::sync::Mutex<Option<(Secret, tokio::time::Instant)>>,
    /// The token requests carry (read without waiting).
    current: std::sync::RwLock<Option<Secret>>,
}

impl ClientCredentials {
    /// # Errors
    /// The secret's file cannot be read.
    pub(crate) fn new(
        config: &crate::config::ClientCredentials,
        upstream: &str,
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        let client = (
            config.token_url.as_str(),
            config.client_id.as_str(),
            config.client_secret_file.as_path(),
        );
        Ok(Self {
            config: config.clone(),
            endpoint: TokenEndpoint::new("client_credentials", upstream, client, connect_timeout)?,
            held: tokio::sync::Mutex::new(None),
            current: std::sync::RwLock::new(None),
        })
    }

    fn current(&self) -> Option<String> {
        self.current
            .read()
            .ok()
            .and_then(|t| t.as_ref().map(|t| t.expose().to_owned()))
    }

    /// Gets a token when none is held, or the held one is about to expire.
    async fn fresh(&self) -> Result<(), String> {
        let mut held = self.held.lock().await;
        if held
            .as_ref()
            .is_some_and(|(_, renew)| tokio::time::Instant::now() < *renew)
        {
            return Ok(());
        }
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(scope) = &self.config.scope {
            form.push(("scope", scope));
        }
        if let Some(resource) = &self.config.resource {
            form.push(("resource", resource));
        }
        let issued = self.endpoint.request("client_credentials", &form).await?;
        let renew = tokio::time::Instant::now() + issued.lifetime.saturating_sub(TOKEN_MARGIN);
        *held = Some((issued.token.clone(), renew));
        if let Ok(mut current) = self.current.write() {
            *current = Some(issued.token);
        }
        Ok(())
    }
}

/// An exchanged token of one principal.
#[derive(Debug)]
struct Exchanged {
    token: Secret,
    /// Got again from then on.
    renew: tokio::time::Instant,
    /// Sent no more from then on.
    expires: tokio::time::Instant,
}

/// The node's client for RFC 8693 token exchange at an upstream's
/// authorization server, and the tokens it got there, per principal and
/// scopes (at most `max_principals`). Neither the secret nor a token is
/// ever logged.
#[derive(Debug)]
pub(crate) struct TokenExchanger {
    config: crate::config::TokenExchange,
    endpoint: TokenEndpoint,
    held: std::sync::Mutex<HashMap<String, Exchanged>>,
}

impl TokenExchanger {
    /// # Errors
    /// The secret's file cannot be read.
    pub(crate) fn new(
        config: &crate::config::TokenExchange,
        upstream: &str,
        connect_timeout: Duration,
    ) -> Result<Self, String> {
        let client = (
            config.token_url.as_str(),
            config.client_id.as_str(),
            config.client_secret_file.as_path(),
        );
        Ok(Self {
            config: config.clone(),
            endpoint: TokenEndpoint::new("token_exchange", upstream, client, connect_timeout)?,
            held: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// The token kept under `key` while it lasts, and whether it is not
    /// yet due to be got again.
    fn held(&self, key: &str) -> Option<(String, bool)> {
        let now = tokio::time::Instant::now();
        let held = self.held.lock().ok()?;
        held.get(key)
            .filter(|t| now < t.expires)
            .map(|t| (t.token.expose().to_owned(), now < t.renew))
    }

    /// Exchanges `caller` (a token of the principal and scopes `key`
    /// names) for one of the upstream's, kept under `key`.
    async fn exchange(&self, key: &str, caller: &CallerToken) -> Result<(), String> {
        let mut form = vec![
            ("grant_type", TOKEN_EXCHANGE_GRANT),
            ("subject_token", caller.secret()),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
        ];
        for (key, value) in [
            ("resource", &self.config.resource),
            ("audience", &self.config.audience),
            ("scope", &self.config.scope),
        ] {
            if let Some(value) = value {
                form.push((key, value));
            }
        }
        let issued = self
            .endpoint
            .request("token_exchange", &form)
            .await
            .map_err(|why| format!("the caller's token could not be exchanged: {why}"))?;
        let now = tokio::time::Instant::now();
        let kept = Exchanged {
            token: issued.token,
            renew: now + issued.lifetime.saturating_sub(TOKEN_MARGIN),
            expires: now + issued.lifetime,
        };
        let Ok(mut held) = self.held.lock() else {
            return Ok(());
        };
        if held.len() >= self.config.max_principals && !held.contains_key(key) {
            held.retain(|_, t| now < t.expires);
            if held.len() >= self.config.max_principals
                && let Some(soonest) = held
                    .iter()
                    .min_by_key(|(_, t)| t.expires)
                    .map(|(k, _)| k.clone())
            {
                held.remove(&soonest);
            }
        }
        held.insert(key.to_owned(), kept);
        metrics::exchanged_tokens(&self.endpoint.upstream, held.len());
        Ok(())
    }
}

/// One session's credential at a `token_exchange` upstream: the tokens of
/// its principal, exchanged from the newest token of the caller's that a
/// request of the session brought to this node. Tokens are kept per
/// principal and scopes: a token that grants fewer scopes never gets one
/// exchanged from a token that grants more.
#[derive(Debug)]
pub(crate) struct ExchangeFor {
    exchanger: Arc<TokenExchanger>,
    principal: String,
    /// The newest token of the caller's, and the key of the tokens kept
    /// for it ([`Self::key`]).
    caller: std::sync::Mutex<(Option<CallerToken>, String)>,
    /// One exchange at a time for the session.
    one: tokio::sync::Mutex<()>,
}

impl ExchangeFor {
    /// Tokens are kept per principal and the scopes (sorted, space
    /// separated) its token grants.
    fn key(principal: &str, scopes: &str) -> String {
        format!("{principal}\n{scopes}")
    }

    /// The key of the tokens kept for the caller's newest token, and that
    /// token.
    fn caller(&self) -> (String, Option<CallerToken>) {
        let held = self.caller.lock().map(|c| c.clone()).unwrap_or_default();
        (held.1, held.0)
    }

    fn current(&self) -> Option<String> {
        self.exchanger
            .held(&self.caller().0)
            .map(|(token, _)| token)
    }

    async fn fresh(&self) -> Result<(), String> {
        let due = || !matches!(self.exchanger.held(&self.caller().0), Some((_, true)));
        if !due() {
            return Ok(());
        }
        let _one = self.one.lock().await;
        if !due() {
            return Ok(());
        }
        let (key, caller) = self.caller();
        let Some(caller) = caller else {
            return Err("no token of the caller's is at hand to exchange".to_owned());
        };
        self.exchanger.exchange(&key, &caller).await
    }
}

/// The longest bearer token read from a file.
const MAX_TOKEN_BYTES: u64 = 16 * 1024;

/// A bearer token kept in a file, read again whenever the file changes
/// (its modification time or length); a file that cannot be read then
/// leaves the last token in use, said once in the log.
#[derive(Debug)]
pub(crate) struct TokenFile {
    path: std::path::PathBuf,
    /// The file's (modification time, length) when last read, and its token.
    read: std::sync::Mutex<(Option<(SystemTime, u64)>, Secret)>,
}

impl TokenFile {
    /// Reads the token at `path` once, at start.
    ///
    /// # Errors
    /// The file cannot be read, holds no token, or one over 16 KiB.
    pub(crate) fn open(path: &std::path::Path) -> Result<Self, String> {
        let file = Self {
            path: path.to_owned(),
            read: std::sync::Mutex::new((None, Secret::default())),
        };
        file.reread()
            .map_err(|why| format!("{}: {why}", path.display()))?;
        Ok(file)
    }

    /// The token now.
    pub(crate) fn token(&self) -> String {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        let known = self.read.lock().map(|r| r.0).unwrap_or_default();
        if stamp.is_some()
            && stamp != known
            && let Err(why) = self.reread()
        {
            tracing::warn!(path = %self.path.display(), why, "The upstream's bearer token file could not be read again; the last token stays in use.");
            if let Ok(mut read) = self.read.lock() {
                read.0 = stamp;
            }
        }
        self.read
            .lock()
            .map(|r| r.1.expose().to_owned())
            .unwrap_or_default()
    }

    fn reread(&self) -> Result<(), String> {
        let meta = std::fs::metadata(&self.path).map_err(|err| err.to_string())?;
        if meta.len() > MAX_TOKEN_BYTES {
            return Err(format!("over {MAX_TOKEN_BYTES} bytes"));
        }
        let text = std::fs::read_to_string(&self.path).map_err(|err| err.to_string())?;
        let token = text.trim();
        if token.is_empty() || token.contains(char::is_whitespace) {
            return Err("it must hold one token".into());
        }
        if let Ok(mut read) = self.read.lock() {
            *read = (
                Some((meta.modified().map_err(|err| err.to_string())?, meta.len())),
                Secret::new(token),
            );
        }
        Ok(())
    }
}

/// A value in a standard header: a string as it is when it is plain
/// visible ASCII (inner spaces allowed), else base64 between `=?base64?`
/// and `?=`; a number in decimal, a boolean in lowercase; nothing else.
fn header_value(value: &Value) -> Option<reqwest::header::HeaderValue> {
    use base64::Engine as _;
    let text = match value {
        Value::String(s) => {
            let padded = s.starts_with([' ', '\t']) || s.ends_with([' ', '\t']);
            let sentinel = s.starts_with("=?base64?") && s.ends_with("?=");
            let visible = s.bytes().all(|b| b == b' ' || (0x21..=0x7e).contains(&b));
            if visible && !padded && !sentinel {
                s.clone()
            } else {
                format!(
                    "=?base64?{}?=",
                    base64::engine::general_purpose::STANDARD.encode(s)
                )
            }
        }
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => return None,
    };
    reqwest::header::HeaderValue::from_str(&text).ok()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Replicas {
    /// The replicas at `urls` of `upstream`, all up, through one pool;
    /// `credential`: the node's own for them.
    pub(crate) fn new(
        upstream: &str,
        urls: &[String],
        connect_timeout: Duration,
        credential: Option<Credential>,
        exchanger: Option<TokenExchanger>,
        mirrors: Mirrors,
    ) -> Self {
        for url in urls {
            metrics::replica_up(upstream, url, true);
        }
        Self {
            credential: credential.map(Arc::new),
            exchanger: exchanger.map(Arc::new),
            mirrors,
            upstream: upstream.to_owned(),
            urls: urls.to_vec(),
            pool: reqwest::Client::builder()
                .connect_timeout(connect_timeout)
                .tcp_nodelay(true)
                .build()
                .unwrap_or_default(),
            next: AtomicUsize::new(0),
            down_until: urls.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// What a new session acting for `caller` sends the upstream: the
    /// node's own credential, or the caller's token exchanged.
    pub(crate) fn credential_for(&self, caller: &Who) -> Option<Arc<Credential>> {
        let Some(exchanger) = &self.exchanger else {
            return self.credential.clone();
        };
        let principal = caller.principal.clone().unwrap_or_default();
        Some(Arc::new(Credential::Exchange(ExchangeFor {
            exchanger: Arc::clone(exchanger),
            principal: principal.clone(),
            caller: std::sync::Mutex::new((
                caller.token.clone(),
                ExchangeFor::key(&principal, &caller.scopes),
            )),
            one: tokio::sync::Mutex::new(()),
        })))
    }

    /// The standard headers of a 2026-07-28 request (`message`):
    /// `Mcp-Method`, `Mcp-Name` where the method names something, and an
    /// `Mcp-Param-*` for each argument the tool mirrors (as the server
    /// requires them: SEP-2243).
    fn standard_headers(&self, message: &Value) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::new();
        let mut put = |name: &str, value: &Value| {
            if let (Ok(name), Some(value)) = (
                reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                header_value(value),
            ) {
                headers.insert(name, value);
            }
        };
        let method = message["method"].as_str().unwrap_or_default();
        put("mcp-method", &message["method"]);
        let params = &message["params"];
        if let Some(field) = mcp_cluster_protocol::methods::name_param(method)
            && !params[field].is_null()
        {
            put("mcp-name", &params[field]);
        }
        if method == mcp_cluster_protocol::methods::TOOLS_CALL
            && let Some(tool) = params["name"].as_str()
        {
            let mirrored = self
                .mirrors
                .lock()
                .map(|m| m.get(tool).cloned().unwrap_or_default())
                .unwrap_or_default();
            for param in mirrored {
                let argument = &params["arguments"][&param.argument];
                if !argument.is_null() {
                    put(&format!("mcp-param-{}", param.header), argument);
                }
            }
        }
        headers
    }

    /// Which replica `url` is.
    pub(crate) fn index_of(&self, url: &str) -> Option<usize> {
        self.urls.iter().position(|u| u == url)
    }

    /// The replica a new session opens at: the next in turn that is up
    /// (the next in turn when none is).
    fn pick(&self) -> usize {
        let n = self.urls.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let now = now_ms();
        (0..n)
            .map(|k| (first + k) % n)
            .find(|&i| self.down_until[i].load(Ordering::Relaxed) <= now)
            .unwrap_or(first)
    }

    /// Replica `i` could not be reached: skipped for [`DOWN_FOR`].
    fn failed(&self, i: usize) {
        let until = now_ms() + u64::try_from(DOWN_FOR.as_millis()).unwrap_or(u64::MAX);
        self.down_until[i].store(until, Ordering::Relaxed);
        metrics::replica_failed(&self.upstream, &self.urls[i]);
    }

    /// Replica `i` answered.
    fn answered(&self, i: usize) {
        if self.down_until[i].swap(0, Ordering::Relaxed) != 0 {
            metrics::replica_up(&self.upstream, &self.urls[i], true);
        }
    }
}

/// Who a new upstream session acts for: the principal's key, the token
/// its request brought and the scopes that grants (`None` and empty for
/// the relay's own sessions and without authorization).
#[derive(Debug, Clone, Default)]
pub(crate) struct Who {
    pub(crate) principal: Option<String>,
    pub(crate) token: Option<CallerToken>,
    /// Sorted, space-separated.
    pub(crate) scopes: String,
}

impl Who {
    /// Who `caller` is.
    pub(crate) fn of(caller: &mcp_cluster_runtime::Caller) -> Self {
        Self::from_parts(caller.principal.as_deref(), caller.token.as_ref())
    }

    /// Who the request of `ctx` acts for.
    pub(crate) fn of_request(ctx: &mcp_cluster_runtime::RequestContext) -> Self {
        Self::from_parts(ctx.principal(), ctx.caller_token())
    }

    fn from_parts(
        principal: Option<&mcp_cluster_store::Principal>,
        token: Option<&CallerToken>,
    ) -> Self {
        let mut scopes: Vec<&str> = principal
            .map(|p| p.scopes.iter().map(String::as_str).collect())
            .unwrap_or_default();
        scopes.sort_unstable();
        Self {
            principal: principal.map(mcp_cluster_store::Principal::key),
            token: token.cloned(),
            scopes: scopes.join(" "),
        }
    }
}

/// Where an upstream session was opened: what another node needs to go on
/// with it (a session's handover, kept in its record).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Attached {
    /// The replica's URL.
    pub(crate) url: String,
    /// Its `Mcp-Session-Id`; `None` for a server that named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) session_id: Option<String>,
    /// The revision its `initialize` negotiated.
    pub(crate) protocol_version: String,
}

/// Says that the conversation's replica could not be reached.
type Unreachable = Arc<dyn Fn() + Send + Sync>;

/// Carries the conversation of `upstream` with a session it opens at one
/// of `replicas` until it ends; returns why. `rejoined`: the session was
/// opened by another node, at that replica ([`Upstream::attached`] says
/// how): no `initialize`, and its GET stream opens at once.
pub(crate) async fn converse(
    upstream: Arc<Upstream>,
    replicas: Arc<Replicas>,
    credential: Option<Arc<Credential>>,
    max_message: usize,
    mut lines: mpsc::Receiver<String>,
    rejoined: Option<usize>,
) -> String {
    let opened = match (rejoined, upstream.attached()) {
        (Some(replica), Some(attached)) => {
            let mut client = Client::with_http(
                replicas.pool.clone(),
                &replicas.urls[replica],
                &attached.protocol_version,
            );
            client.set_max_message_bytes(max_message);
            client.set_session_id(attached.session_id.clone());
            if let Some(credential) = &credential {
                let credential = Arc::clone(credential);
                client.set_bearer(Arc::new(move || credential.token()));
            }
            Ok((client, replica))
        }
        _ => {
            let Some(first) = lines.recv().await else {
                return "closed before it began".to_owned();
            };
            open(
                &upstream,
                &replicas,
                credential.as_ref(),
                max_message,
                &first,
            )
            .await
        }
    };
    let (client, replica) = match opened {
        Ok((client, replica)) => (Arc::new(client), replica),
        Err(why) => return why,
    };
    let url = replicas.urls[replica].clone();
    // A conversation of 2026-07-28 (opened by `server/discover`): no
    // session, the standard headers on every message, and a status with a
    // JSON-RPC error in its body is that error, not the end.
    let stateless = client.protocol_version() == ProtocolVersion::STATELESS.as_str();
    let unreachable: Unreachable = {
        let replicas = Arc::clone(&replicas);
        Arc::new(move || replicas.failed(replica))
    };
    let lost = Arc::new(LostSignal::default());
    let mut tasks = JoinSet::new();
    // 2026-07-28: the POSTs running, by request id (as JSON text).
    let mut posting: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
    if rejoined.is_some() {
        tasks.spawn(standalone(
            Arc::clone(&client),
            Arc::clone(&upstream),
            Arc::clone(&lost),
            credential.clone(),
        ));
    }
    let ended = loop {
        tokio::select! {
            line = lines.recv() => {
                let Some(line) = line.filter(|l| !l.is_empty()) else {
                    break "closed".to_owned();
                };
                let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
                let request = message.get("method").is_some() && message.get("id").is_some();
                // A token shortly before it expires is got again first.
                if let Some(credential) = &credential
                    && let Err(why) = credential.prepare().await
                {
                    if request && credential.token().is_none() {
                        // Nothing to send: the request fails, saying why.
                        refuse(&upstream, &message["id"], &format!("has no token for this caller: {why}")).await;
                        continue;
                    }
                    tracing::warn!(upstream = %upstream.name(), why, "No token for the upstream; the request goes without a fresh one.");
                }
                let headers = if stateless {
                    replicas.standard_headers(&message)
                } else {
                    reqwest::header::HeaderMap::new()
                };
                if request {
                    let id = message["id"].clone();
                    let running = tasks.spawn(call(
                        Arc::clone(&client),
                        Arc::clone(&upstream),
                        (message, headers),
                        Arc::clone(&lost),
                        Arc::clone(&unreachable),
                    ));
                    if stateless {
                        posting.retain(|_, task: &mut tokio::task::AbortHandle| !task.is_finished());
                        posting.insert(id.to_string(), running);
                    }
                    continue;
                }
                // 2026-07-28: closing a request's stream is its
                // cancellation (the revision has no notification for it).
                if stateless {
                    if message["method"] == methods::NOTIFICATION_CANCELLED
                        && let Some(task) = posting.remove(&message["params"]["requestId"].to_string())
                    {
                        tracing::debug!(upstream = %upstream.name(), "A request was cancelled; its POST is closed.");
                        task.abort();
                    }
                    continue;
                }
                match client.post_with(&message, headers).await {
                    Ok(Reply::Status(status, ..)) if status.as_u16() == 404 && !stateless => break gone_404(&url),
                    Ok(Reply::Accepted | Reply::Json(..) | Reply::Sse(_)) => {
                        if message["method"] == "notifications/initialized" {
                            tasks.spawn(standalone(
                                Arc::clone(&client),
                                Arc::clone(&upstream),
                                Arc::clone(&lost),
                                credential.clone(),
                            ));
                        }
                    }
                    Ok(Reply::Status(status, ..)) => {
                        metrics::relay_error(upstream.name(), "http_status");
                        tracing::debug!(upstream = %upstream.name(), %status, "The upstream refused a notification or an answer.");
                    }
                    Err(err) => {
                        metrics::relay_error(upstream.name(), "http_failed");
                        unreachable();
                        tracing::debug!(upstream = %upstream.name(), error = %err, "A notification or an answer did not reach the upstream.");
                        if refused(&err) {
                            break gone_refused(&url);
                        }
                    }
                }
            }
            () = lost.notify.notified() => break lost.describe(&url),
            () = upstream.ended() => {
                // The polite end: the upstream forgets the session now.
                if !stateless && !upstream.is_released() {
                    let _ = tokio::time::timeout(RETRY_MAX, client.delete()).await;
                }
                break "was ended by the node".to_owned();
            }
        }
    };
    tasks.abort_all();
    ended
}

fn gone_404(url: &str) -> String {
    format!("ended its session (404 from {url})")
}

fn gone_refused(url: &str) -> String {
    format!("is gone with its session (nothing listens at {url} any more)")
}

/// Whether `err` is a connection the replica's host refused: nothing
/// listens there, so the process that kept the session in its memory is
/// gone (a timeout or a reset may pass; this does not).
fn refused(err: &mcp_cluster_client::ClientError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(err) = source {
        if err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// Why a conversation ended on its own: its upstream session is gone.
#[derive(Debug, Clone, Copy)]
enum Lost {
    /// The replica answered 404.
    NotFound,
    /// The replica refused the connection.
    Refused,
}

/// Where a conversation's tasks say its upstream session is gone.
#[derive(Debug, Default)]
struct LostSignal {
    why: std::sync::OnceLock<Lost>,
    notify: Notify,
}

impl LostSignal {
    fn lost(&self, why: Lost) {
        let _ = self.why.set(why);
        self.notify.notify_one();
    }

    fn describe(&self, url: &str) -> String {
        match self.why.get() {
            Some(Lost::Refused) => gone_refused(url),
            _ => gone_404(url),
        }
    }
}

/// Why an `initialize` failed.
enum InitializeError {
    /// The replica could not be reached: another may be.
    Unreached(String),
    /// The replica answered, but opened no session.
    Refused(String),
}

/// POSTs `initialize` (`first`) at the next replica up, and at the next
/// while one cannot be reached: the client of the upstream session it
/// opened and its replica, its answer handed to `upstream`.
async fn open(
    upstream: &Arc<Upstream>,
    replicas: &Replicas,
    credential: Option<&Arc<Credential>>,
    max_message: usize,
    first: &str,
) -> Result<(Client, usize), String> {
    let message: Value =
        serde_json::from_str(first).map_err(|err| format!("was sent no JSON ({err})"))?;
    let id = message["id"].clone();
    // `initialize` names its revision in its params, `server/discover`
    // (2026-07-28) in its `_meta`.
    let asked = message["params"]["protocolVersion"]
        .as_str()
        .or_else(|| message["params"]["_meta"][meta::PROTOCOL_VERSION].as_str())
        .unwrap_or_default();
    let headers = if message["method"] == methods::SERVER_DISCOVER {
        replicas.standard_headers(&message)
    } else {
        reqwest::header::HeaderMap::new()
    };
    let mut tries = replicas.urls.len();
    loop {
        let replica = replicas.pick();
        let url = &replicas.urls[replica];
        let mut client = Client::with_http(replicas.pool.clone(), url, asked);
        client.set_max_message_bytes(max_message);
        if let Some(credential) = credential {
            if let Err(why) = credential.prepare().await {
                let why = format!("has no token for this caller: {why}");
                refuse(upstream, &id, &why).await;
                return Err(why);
            }
            let credential = Arc::clone(credential);
            client.set_bearer(Arc::new(move || credential.token()));
        }
        tries -= 1;
        match initialize(upstream, &mut client, (&message, &headers), &id, url).await {
            Ok(()) => {
                replicas.answered(replica);
                return Ok((client, replica));
            }
            Err(InitializeError::Unreached(why)) => {
                replicas.failed(replica);
                if tries == 0 {
                    return Err(fail(upstream, &id, &why).await);
                }
            }
            Err(InitializeError::Refused(why)) => return Err(fail(upstream, &id, &why).await),
        }
    }
}

/// POSTs `initialize` on `client`, which then names the upstream session
/// it opened; its answer handed to `upstream`.
async fn initialize(
    upstream: &Arc<Upstream>,
    client: &mut Client,
    (message, headers): (&Value, &reqwest::header::HeaderMap),
    id: &Value,
    url: &str,
) -> Result<(), InitializeError> {
    let (answer, session) = match client.post_with(message, headers.clone()).await {
        Ok(Reply::Json(answer, headers)) => (answer, session_id_of(&headers)),
        Ok(Reply::Sse(mut stream)) => {
            let session = session_id_of(stream.headers());
            match answer_on(upstream, &mut stream, id).await {
                Some(answer) => (answer, session),
                None => {
                    return Err(InitializeError::Refused(
                        "broke its initialize stream".into(),
                    ));
                }
            }
        }
        Ok(Reply::Status(status, ..)) => {
            return Err(InitializeError::Refused(format!(
                "answered initialize with HTTP {status}"
            )));
        }
        Ok(Reply::Accepted) => {
            return Err(InitializeError::Refused(
                "answered initialize with 202".into(),
            ));
        }
        Err(err) => {
            return Err(InitializeError::Unreached(format!(
                "could not be reached ({err})"
            )));
        }
    };
    if let Some(version) = answer["result"]["protocolVersion"].as_str() {
        client.set_protocol_version(version);
        upstream.set_attached(Attached {
            url: url.to_owned(),
            session_id: session.clone(),
            protocol_version: version.to_owned(),
        });
    }
    client.set_session_id(session);
    upstream.received(answer.to_string().as_bytes()).await;
    Ok(())
}

/// Answers request `id` with -32603 saying why the upstream could not;
/// returns why.
async fn fail(upstream: &Arc<Upstream>, id: &Value, why: &str) -> String {
    metrics::relay_error(upstream.name(), "http_failed");
    refuse(upstream, id, why).await;
    why.to_owned()
}

/// Answers request `id` with -32603 `upstream {name} {why}`.
async fn refuse(upstream: &Arc<Upstream>, id: &Value, why: &str) {
    let error = json!({"jsonrpc": "2.0", "id": id, "error": {
        "code": -32603, "message": format!("upstream {} {why}", upstream.name())}});
    upstream.received(error.to_string().as_bytes()).await;
}

/// Hands every message of `stream` to `upstream` until the answer to `id`
/// (returned, not handed on); `None` when the stream ended first.
async fn answer_on(upstream: &Arc<Upstream>, stream: &mut SseStream, id: &Value) -> Option<Value> {
    loop {
        let event = stream.next_event().await.ok()??;
        if !event.has_data || event.data.is_empty() {
            continue;
        }
        let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
            metrics::relay_error(upstream.name(), "not_jsonrpc");
            continue;
        };
        if message.get("method").is_none() && message.get("id") == Some(id) {
            return Some(message);
        }
        upstream.received(event.data.as_bytes()).await;
    }
}

/// One request: POSTed, its answer (and whatever came before it on its
/// stream) handed to `upstream`, its stream resumed when it breaks; a
/// replica that cannot be reached said so (`unreachable`).
async fn call(
    client: Arc<Client>,
    upstream: Arc<Upstream>,
    (message, headers): (Value, reqwest::header::HeaderMap),
    lost: Arc<LostSignal>,
    unreachable: Unreachable,
) {
    let id = message["id"].clone();
    // Only 2026-07-28 requests carry the standard headers.
    let stateless = !headers.is_empty();
    let mut stream = match client.post_with(&message, headers).await {
        Ok(Reply::Json(answer, _)) => {
            upstream.received(answer.to_string().as_bytes()).await;
            return;
        }
        Ok(Reply::Sse(stream)) => stream,
        // 2026-07-28: a refusal's body is the request's JSON-RPC error
        // (-32601 with 404, -32020 with 400, ...): the client's answer.
        Ok(Reply::Status(status, body, _)) if stateless => {
            match serde_json::from_str::<Value>(&body) {
                Ok(answer) if answer["id"] == id && answer["error"].is_object() => {
                    upstream.received(body.as_bytes()).await;
                }
                _ => {
                    fail(&upstream, &id, &format!("answered HTTP {status}")).await;
                }
            }
            return;
        }
        Ok(Reply::Status(status, ..)) if status.as_u16() == 404 => {
            lost.lost(Lost::NotFound);
            return;
        }
        Ok(Reply::Status(status, ..)) => {
            fail(&upstream, &id, &format!("answered HTTP {status}")).await;
            return;
        }
        Ok(Reply::Accepted) => {
            fail(&upstream, &id, "answered a request with 202").await;
            return;
        }
        Err(err) => {
            unreachable();
            fail(&upstream, &id, &format!("could not be reached ({err})")).await;
            if refused(&err) {
                lost.lost(Lost::Refused);
            }
            return;
        }
    };
    for resumed in 0..=RESUMES {
        if let Some(answer) = answer_on(&upstream, &mut stream, &id).await {
            upstream.received(answer.to_string().as_bytes()).await;
            return;
        }
        let Some(last) = stream.last_event_id.clone() else {
            break;
        };
        if resumed == RESUMES {
            break;
        }
        tokio::time::sleep(retry_of(&stream)).await;
        stream = match client.get(Some(&last)).await {
            Ok(Reply::Sse(next)) => next,
            Ok(Reply::Status(status, ..)) if status.as_u16() == 404 => {
                lost.lost(Lost::NotFound);
                return;
            }
            Err(err) if refused(&err) => {
                lost.lost(Lost::Refused);
                break;
            }
            _ => break,
        };
    }
    fail(
        &upstream,
        &id,
        "broke the stream of a request before its answer",
    )
    .await;
}

fn retry_of(stream: &SseStream) -> Duration {
    stream
        .retry
        .map_or(RETRY_DEFAULT, Duration::from_millis)
        .min(RETRY_MAX)
}

/// The session's GET stream, open while the conversation lasts.
async fn standalone(
    client: Arc<Client>,
    upstream: Arc<Upstream>,
    lost: Arc<LostSignal>,
    credential: Option<Arc<Credential>>,
) {
    let mut last: Option<String> = None;
    let mut pause = RETRY_DEFAULT;
    loop {
        if let Some(credential) = &credential {
            let _ = credential.prepare().await;
        }
        match client.get(last.as_deref()).await {
            Ok(Reply::Sse(mut stream)) => {
                while let Ok(Some(event)) = stream.next_event().await {
                    if event.has_data && !event.data.is_empty() {
                        upstream.received(event.data.as_bytes()).await;
                    }
                }
                last = stream.last_event_id.clone().or(last);
                pause = retry_of(&stream);
            }
            // The server has no GET stream.
            Ok(Reply::Status(status, ..)) if status.as_u16() == 405 => return,
            Ok(Reply::Status(status, ..)) if status.as_u16() == 404 => {
                lost.lost(Lost::NotFound);
                return;
            }
            Err(err) if refused(&err) => {
                lost.lost(Lost::Refused);
                return;
            }
            _ => pause = (pause * 2).min(RETRY_MAX),
        }
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_credential_shows_its_token_in_debug_output() {
        let dir = std::env::temp_dir().join(format!("mcp-relay-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "s3cr3t-token\n").unwrap();
        let file = TokenFile::open(&path).unwrap();
        assert_eq!(file.token(), "s3cr3t-token");
        let exchange = ExchangeFor {
            exchanger: Arc::new(
                TokenExchanger::new(
                    &crate::config::TokenExchange {
                        client_secret_file: path,
                        ..crate::config::TokenExchange::default()
                    },
                    "up",
                    Duration::from_secs(1),
                )
                .unwrap(),
            ),
            principal: "https://idp#alice".into(),
            caller: std::sync::Mutex::new((Some(CallerToken::new("caller-token")), String::new())),
            one: tokio::sync::Mutex::new(()),
        };
        let shown = format!(
            "{:?} {:?}",
            Credential::File(file),
            Credential::Exchange(exchange)
        );
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("caller-token"),
            "{shown}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
