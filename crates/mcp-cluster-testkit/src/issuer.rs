//! A test OAuth 2.1 authorization server: real HTTP on `127.0.0.1:0`, so a
//! node under test discovers it, fetches its keys and introspects tokens
//! exactly as it would with a real identity provider.
//!
//! It serves, under its issuer identifier `http://127.0.0.1:PORT[PATH]`:
//! - metadata: RFC 8414 at `/.well-known/oauth-authorization-server[PATH]`,
//!   OpenID Connect Discovery at `/.well-known/openid-configuration[PATH]`
//!   (path inserted, as MCP clients try first) and
//!   `[PATH]/.well-known/openid-configuration` (path appended, OpenID
//!   Connect Discovery 1.0 section 4), as [`Discovery`] chooses;
//! - `GET [PATH]/jwks`: the published keys (RFC 7517), `kid` the key's
//!   RFC 7638 thumbprint;
//! - `POST [PATH]/introspect`: RFC 7662, HTTP Basic client authentication;
//! - `POST [PATH]/token`: the client credentials grant (RFC 6749 section
//!   4.4) and token exchange (RFC 8693) of a token this issuer signed (the
//!   new token keeps its `sub`, names the exchanging client in
//!   `client_id` and `act`), `resource` (RFC 8707) or `audience` becoming
//!   the token's `aud`.
//!
//! Tests make tokens with [`TestIssuer::token`], valid ones and the
//! forgeries a resource server must refuse ([`TokenBuilder::forge_alg_none`]
//! and the other `forge_*`). Keys come from the real `openssl` CLI (RSA 2048
//! and EC P-256, PKCS#8 PEM): fast in debug builds, where pure-Rust RSA key
//! generation takes seconds.
//!
//! Owner: the test holding the [`TestIssuer`]. Stop path: dropping it closes
//! the control channel; the server thread then stops its actix server
//! (open connections closed) and is joined.

use std::collections::HashMap;
use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use anyhow::{Context, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

/// Largest form body taken by the introspection and token endpoints: a
/// token and a few parameters weigh far less.
const MAX_FORM_BYTES: usize = 16 << 10;

/// Lifetime of a token when the test does not choose one, in seconds.
const DEFAULT_LIFETIME_SECS: i64 = 300;
/// The grant of RFC 8693 token exchange.
const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 section 3: an access token.
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// The subject of a token when the test does not choose one.
const DEFAULT_SUBJECT: &str = "alice";

/// Commands waiting for the server thread: a test sends one at a time.
const CONTROL_CAPACITY: usize = 4;

/// Tries and pause between them when listening again on the same port (the
/// old listening socket may close a moment after its server stopped).
const REBIND_ATTEMPTS: u32 = 100;
const REBIND_PAUSE: Duration = Duration::from_millis(20);

/// A signing algorithm of the issuer's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KeyAlg {
    /// RSASSA-PKCS1-v1_5 with SHA-256, 2048-bit keys.
    #[default]
    Rs256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
}

impl KeyAlg {
    /// The JOSE name: `RS256` or `ES256`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Rs256 => "RS256",
            Self::Es256 => "ES256",
        }
    }

    fn algorithm(self) -> Algorithm {
        match self {
            Self::Rs256 => Algorithm::RS256,
            Self::Es256 => Algorithm::ES256,
        }
    }
}

/// Which metadata documents the issuer serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Discovery {
    /// RFC 8414 and OpenID Connect Discovery (path inserted and appended).
    #[default]
    All,
    /// RFC 8414 only.
    OAuth,
    /// OpenID Connect Discovery only, path inserted and appended.
    OpenId,
    /// OpenID Connect Discovery only, at `[PATH]/.well-known/openid-configuration`
    /// (the last place an MCP client looks).
    OpenIdAppended,
}

/// The bytes of the RSA public key used as an HMAC secret by
/// [`TokenBuilder::forge_key_confusion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublicKeyForm {
    /// The SubjectPublicKeyInfo PEM text, `-----BEGIN PUBLIC KEY-----` and
    /// final newline included (what a verifier reading a PEM file holds).
    Pem,
    /// The SubjectPublicKeyInfo DER bytes.
    Der,
}

/// How a [`TestIssuer`] is set up; [`Default`] gives a root issuer serving
/// every metadata document.
#[derive(Debug, Clone)]
pub struct IssuerOptions {
    /// The path of the issuer identifier, e.g. `/realms/test` (RFC 8414
    /// section 3.1 inserts the well-known path before it); empty for none.
    /// Plain segments only: letters, digits, `-._~` and `/`. Default empty.
    pub path: String,
    /// Which metadata documents are served. Default [`Discovery::All`].
    pub discovery: Discovery,
    /// The one client known to the introspection and token endpoints.
    /// Default `mcp-node`.
    pub client_id: String,
    /// Its secret. Default `mcp-node-secret`.
    pub client_secret: String,
    /// `scopes_supported` in the metadata; the token endpoint refuses
    /// other scopes (`invalid_scope`) unless it is empty. Default
    /// `mcp:tools`, `mcp:resources`, `mcp:prompts`.
    pub scopes_supported: Vec<String>,
    /// `expires_in` of a token got by token exchange (never past the
    /// exchanged token's own `exp`). Default 300.
    pub exchanged_lifetime_secs: i64,
}

impl Default for IssuerOptions {
    fn default() -> Self {
        Self {
            path: String::new(),
            discovery: Discovery::All,
            client_id: "mcp-node".to_owned(),
            client_secret: "mcp-node-secret".to_owned(),
            scopes_supported: ["mcp:tools", "mcp:resources", "mcp:prompts"]
                .map(str::to_owned)
                .to_vec(),
            exchanged_lifetime_secs: DEFAULT_LIFETIME_SECS,
        }
    }
}

/// A running test authorization server. Dropping it stops the server.
pub struct TestIssuer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// Commands to the server thread, written by [`Self::set_listening`],
    /// read by the thread's loop; dropping it (in `Drop`) stops the server.
    control: Option<mpsc::Sender<Control>>,
    /// The thread running the actix system; joined on drop.
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for TestIssuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestIssuer")
            .field("issuer", &self.shared.issuer)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl TestIssuer {
    /// Starts a root issuer (`http://127.0.0.1:PORT`) serving every
    /// metadata document, with one RS256 and one ES256 key.
    ///
    /// # Errors
    /// `openssl` is missing or failed, or no port could be bound.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(IssuerOptions::default()).await
    }

    /// Starts an issuer set up by `options`, with one RS256 and one ES256
    /// key.
    ///
    /// # Errors
    /// The path is not plain, `openssl` is missing or failed, or no port
    /// could be bound.
    pub async fn start_with(options: IssuerOptions) -> anyhow::Result<Self> {
        let path = plain_path(&options.path)?;
        let ring = tokio::task::spawn_blocking(KeyRing::generate).await??;
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            issuer: format!("http://{addr}{path}"),
            path,
            discovery: options.discovery,
            client_id: options.client_id,
            client_secret: options.client_secret,
            scopes_supported: options.scopes_supported,
            keys: Mutex::new(ring),
            opaque: Mutex::new(HashMap::new()),
            down: AtomicBool::new(false),
            jwks_fetches: AtomicU64::new(0),
            metadata_fetches: AtomicU64::new(0),
            introspections: AtomicU64::new(0),
            token_requests: AtomicU64::new(0),
            token_exchanges: AtomicU64::new(0),
            exchanged: Mutex::new(Vec::new()),
            exchanged_lifetime_secs: options.exchanged_lifetime_secs,
            next_jti: AtomicU64::new(1),
        });
        let (control, control_rx) = mpsc::channel(CONTROL_CAPACITY);
        let (started_tx, started_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("test-issuer".to_owned())
            .spawn({
                let shared = Arc::clone(&shared);
                move || run_server(shared, listener, addr, control_rx, started_tx)
            })?;
        // From here on, an error drops the issuer, which stops the thread.
        let issuer = Self {
            shared,
            addr,
            control: Some(control),
            thread: Some(thread),
        };
        started_rx
            .await
            .context("the issuer's server thread stopped")??;
        Ok(issuer)
    }

    /// The issuer identifier, `http://127.0.0.1:PORT[PATH]`: the `issuer`
    /// of its metadata and the `iss` of its tokens.
    pub fn issuer(&self) -> &str {
        &self.shared.issuer
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without the issuer path.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The RFC 8414 metadata URL (served unless [`Discovery`] excludes it).
    pub fn oauth_metadata_url(&self) -> String {
        format!("{}{}", self.base_url(), self.shared.oauth_metadata_path())
    }

    /// The OpenID Connect Discovery URL with the issuer path inserted after
    /// the well-known part.
    pub fn openid_metadata_url(&self) -> String {
        format!("{}{}", self.base_url(), self.shared.openid_inserted_path())
    }

    /// The OpenID Connect Discovery URL with the well-known part appended
    /// to the issuer (the same as [`Self::openid_metadata_url`] for a root
    /// issuer).
    pub fn openid_appended_metadata_url(&self) -> String {
        format!("{}{}", self.base_url(), self.shared.openid_appended_path())
    }

    /// The `jwks_uri`.
    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.shared.issuer)
    }

    /// The `introspection_endpoint`.
    pub fn introspection_endpoint(&self) -> String {
        format!("{}/introspect", self.shared.issuer)
    }

    /// The `token_endpoint`.
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.shared.issuer)
    }

    /// The client id the introspection and token endpoints accept.
    pub fn client_id(&self) -> &str {
        &self.shared.client_id
    }

    /// That client's secret.
    pub fn client_secret(&self) -> &str {
        &self.shared.client_secret
    }

    /// Adds a new RS256 key (a new `kid`) that signs RS256 tokens from now
    /// on; the older keys stay published until [`Self::retire`]d. Returns
    /// the new `kid`.
    ///
    /// # Errors
    /// `openssl` failed.
    pub async fn rotate(&self) -> anyhow::Result<String> {
        self.rotate_alg(KeyAlg::Rs256).await
    }

    /// As [`Self::rotate`], for the key signing `alg` tokens.
    ///
    /// # Errors
    /// `openssl` failed.
    pub async fn rotate_alg(&self, alg: KeyAlg) -> anyhow::Result<String> {
        let key = Arc::new(tokio::task::spawn_blocking(move || Key::generate(alg)).await??);
        let kid = key.kid.clone();
        let mut ring = self.shared.keys();
        ring.published.push(Arc::clone(&key));
        match alg {
            KeyAlg::Rs256 => ring.current_rs = key,
            KeyAlg::Es256 => ring.current_es = key,
        }
        Ok(kid)
    }

    /// Removes the key `kid` from the JWKS; returns whether it was there.
    /// If it still signs (no rotation since), tokens keep being signed with
    /// it: a key the JWKS no longer has.
    pub fn retire(&self, kid: &str) -> bool {
        let mut ring = self.shared.keys();
        let before = ring.published.len();
        ring.published.retain(|key| key.kid != kid);
        ring.published.len() != before
    }

    /// The `kid` of every published key, oldest first.
    pub fn kids(&self) -> Vec<String> {
        let ring = self.shared.keys();
        ring.published.iter().map(|key| key.kid.clone()).collect()
    }

    /// The `kid` of the key signing `alg` tokens now.
    pub fn current_kid(&self, alg: KeyAlg) -> String {
        self.shared.keys().current(alg).kid.clone()
    }

    /// The SubjectPublicKeyInfo of the key `kid` (published, or signing
    /// though retired) as PEM text or DER bytes: what a verifier configured
    /// with a key file holds, and what [`TokenBuilder::forge_key_confusion`]
    /// uses as its secret.
    pub fn public_key(&self, kid: &str, form: PublicKeyForm) -> Option<Vec<u8>> {
        let ring = self.shared.keys();
        let key = ring
            .published
            .iter()
            .chain([&ring.current_rs, &ring.current_es])
            .find(|key| key.kid == kid)?;
        Some(match form {
            PublicKeyForm::Pem => key.public_pem.clone().into_bytes(),
            PublicKeyForm::Der => key.public_der.clone(),
        })
    }

    /// The JWKS as `GET jwks_uri` serves it now.
    pub fn jwks(&self) -> Value {
        serde_json::to_value(self.shared.jwks()).unwrap_or(Value::Null)
    }

    /// Requests for the JWKS so far, answered or not (503 while down).
    pub fn jwks_fetches(&self) -> u64 {
        self.shared.jwks_fetches.load(Ordering::SeqCst)
    }

    /// Requests for any metadata document so far, answered or not.
    pub fn metadata_fetches(&self) -> u64 {
        self.shared.metadata_fetches.load(Ordering::SeqCst)
    }

    /// Requests to the introspection endpoint so far, whatever the answer
    /// (401 and 503 included).
    pub fn introspections(&self) -> u64 {
        self.shared.introspections.load(Ordering::SeqCst)
    }

    /// Requests to the token endpoint so far, whatever the answer.
    pub fn token_requests(&self) -> u64 {
        self.shared.token_requests.load(Ordering::SeqCst)
    }

    /// Token exchanges answered with a token so far.
    pub fn token_exchanges(&self) -> u64 {
        self.shared.token_exchanges.load(Ordering::SeqCst)
    }

    /// The subject tokens of the token exchanges so far, in order (to
    /// tell which of a caller's tokens a node exchanged).
    pub fn exchanged_subject_tokens(&self) -> Vec<String> {
        self.shared
            .exchanged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// While `down`, every endpoint (metadata, JWKS, introspection, token)
    /// answers 503 with `Retry-After: 1`; requests are still counted.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }

    /// Whether [`Self::set_down`] made it answer 503.
    pub fn is_down(&self) -> bool {
        self.shared.down.load(Ordering::SeqCst)
    }

    /// `false` stops the HTTP server: open connections are closed and new
    /// ones refused. `true` listens again on the same port. Returns once
    /// done.
    ///
    /// # Errors
    /// The port could not be bound again (another process took it), or the
    /// server thread has stopped.
    pub async fn set_listening(&self, listening: bool) -> anyhow::Result<()> {
        let control = self.control.as_ref().context("the issuer is stopped")?;
        let (done, answer) = oneshot::channel();
        control
            .send(Control::Listen { listening, done })
            .await
            .map_err(|_| anyhow!("the issuer's server thread has stopped"))?;
        answer
            .await
            .context("the issuer's server thread has stopped")?
    }

    /// A builder of a token from this issuer: `sub` `alice`, `iat` now,
    /// `exp` in 300 s, a fresh `jti`, signed by the current RS256 key.
    pub fn token(&self) -> TokenBuilder {
        TokenBuilder::new(Arc::clone(&self.shared))
    }

    /// Registers an opaque token for introspection, and returns it. Its
    /// answer is `{"active": true}` with the claims `iss` (this issuer),
    /// `sub` `alice`, `iat` now, `exp` in 300 s, overlaid by the members of
    /// `claims` (a JSON object; anything else adds nothing), e.g. `scope`,
    /// `client_id`, `aud`. Inactive (`{"active": false}`) when `active` is
    /// false, or once `exp` has passed or while `nbf` is ahead.
    pub fn opaque_token(&self, active: bool, claims: Value) -> String {
        let mut base = TokenBuilder::new(Arc::clone(&self.shared)).claims;
        base.remove("jti");
        if let Value::Object(claims) = claims {
            base.extend(claims);
        }
        self.shared.register_opaque(active, base)
    }

    /// Makes the opaque token `token` inactive; returns whether it was
    /// registered.
    pub fn revoke(&self, token: &str) -> bool {
        let mut opaque = self.shared.opaque();
        match opaque.get_mut(token) {
            Some(entry) => {
                entry.active = false;
                true
            }
            None => false,
        }
    }
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        drop(self.control.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Which `kid` a token's header carries.
#[derive(Debug, Clone)]
enum KidChoice {
    /// The signing key's (or, for a forgery, the key it pretends to be).
    Signing,
    /// This one.
    Override(String),
    /// None at all.
    Omit,
}

/// A token being made; see [`TestIssuer::token`]. Setters overwrite: the
/// last one touching a claim wins.
#[derive(Clone)]
pub struct TokenBuilder {
    shared: Arc<Shared>,
    claims: Map<String, Value>,
    iat: i64,
    alg: KeyAlg,
    kid: KidChoice,
    typ: String,
}

impl fmt::Debug for TokenBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBuilder")
            .field("claims", &self.claims)
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .field("typ", &self.typ)
            .finish_non_exhaustive()
    }
}

impl TokenBuilder {
    fn new(shared: Arc<Shared>) -> Self {
        let iat = now();
        let jti = shared.next_jti.fetch_add(1, Ordering::SeqCst);
        let mut claims = Map::new();
        claims.insert("iss".into(), shared.issuer.clone().into());
        claims.insert("sub".into(), DEFAULT_SUBJECT.into());
        claims.insert("iat".into(), iat.into());
        claims.insert("exp".into(), (iat + DEFAULT_LIFETIME_SECS).into());
        claims.insert("jti".into(), format!("jti-{jti}").into());
        Self {
            shared,
            claims,
            iat,
            alg: KeyAlg::Rs256,
            kid: KidChoice::Signing,
            typ: "at+jwt".to_owned(),
        }
    }

    /// `sub`.
    #[must_use]
    pub fn subject(self, sub: impl Into<String>) -> Self {
        self.claim("sub", Value::String(sub.into()))
    }

    /// `aud`, one audience as a string. None by default.
    #[must_use]
    pub fn audience(self, aud: impl Into<String>) -> Self {
        self.claim("aud", Value::String(aud.into()))
    }

    /// `aud`, as an array.
    #[must_use]
    pub fn audiences<S: Into<String>>(self, auds: impl IntoIterator<Item = S>) -> Self {
        let auds = auds.into_iter().map(|a| Value::String(a.into())).collect();
        self.claim("aud", Value::Array(auds))
    }

    /// `scope`, space-separated (RFC 9068 section 2.2.3). None by default.
    #[must_use]
    pub fn scopes<S: Into<String>>(self, scopes: impl IntoIterator<Item = S>) -> Self {
        let scopes: Vec<String> = scopes.into_iter().map(Into::into).collect();
        self.claim("scope", Value::String(scopes.join(" ")))
    }

    /// `client_id`. None by default.
    #[must_use]
    pub fn client_id(self, client_id: impl Into<String>) -> Self {
        self.claim("client_id", Value::String(client_id.into()))
    }

    /// `exp` = `iat` + `secs`; negative makes an expired token.
    #[must_use]
    pub fn expires_in(self, secs: i64) -> Self {
        let exp = self.iat + secs;
        self.claim("exp", exp.into())
    }

    /// `nbf` = `iat` + `secs`; positive makes a token not valid yet. None
    /// by default.
    #[must_use]
    pub fn not_before_in(self, secs: i64) -> Self {
        let nbf = self.iat + secs;
        self.claim("nbf", nbf.into())
    }

    /// The key that signs: the current one for `alg`. Default RS256.
    #[must_use]
    pub fn alg(mut self, alg: KeyAlg) -> Self {
        self.alg = alg;
        self
    }

    /// The header's `kid`, whatever key signs.
    #[must_use]
    pub fn kid_override(mut self, kid: impl Into<String>) -> Self {
        self.kid = KidChoice::Override(kid.into());
        self
    }

    /// No `kid` in the header.
    #[must_use]
    pub fn no_kid(mut self) -> Self {
        self.kid = KidChoice::Omit;
        self
    }

    /// The header's `typ`. Default `at+jwt` (RFC 9068 section 2.1).
    #[must_use]
    pub fn typ(mut self, typ: impl Into<String>) -> Self {
        self.typ = typ.into();
        self
    }

    /// `iss`, instead of this issuer.
    #[must_use]
    pub fn issuer_override(self, iss: impl Into<String>) -> Self {
        self.claim("iss", Value::String(iss.into()))
    }

    /// Any claim, set or replaced.
    #[must_use]
    pub fn claim(mut self, name: impl Into<String>, value: Value) -> Self {
        self.claims.insert(name.into(), value);
        self
    }

    /// Removes a claim (a default one too, e.g. `exp` or `sub`).
    #[must_use]
    pub fn remove_claim(mut self, name: &str) -> Self {
        self.claims.remove(name);
        self
    }

    /// The claims as they stand.
    pub fn claims(&self) -> &Map<String, Value> {
        &self.claims
    }

    /// The signed JWT: compact serialization, signed by the current key
    /// for its alg.
    ///
    /// # Panics
    /// When signing fails (never with the keys this issuer makes).
    pub fn sign(&self) -> String {
        self.try_sign()
            .unwrap_or_else(|err| panic!("signing a test token failed: {err:#}"))
    }

    /// Registers the claims as an active opaque token for introspection
    /// (see [`TestIssuer::opaque_token`]), and returns it.
    pub fn opaque(&self) -> String {
        self.shared.register_opaque(true, self.claims.clone())
    }

    /// Forgery: `alg: none`, no signature (`header.payload.`), header `kid`
    /// that of the current key unless chosen (RFC 8725 section 2.1).
    pub fn forge_alg_none(&self) -> String {
        let current = self.shared.keys().current(self.alg).kid.clone();
        let mut header = Map::new();
        header.insert("alg".into(), "none".into());
        header.insert("typ".into(), self.typ.clone().into());
        if let Some(kid) = self.header_kid(&current) {
            header.insert("kid".into(), kid.into());
        }
        format!("{}.{}.", encode_part(&header), encode_part(&self.claims))
    }

    /// Forgery: HS256 keyed with the current RS256 key's public key bytes
    /// (`form`), header `kid` that key's: the key-confusion attack on a
    /// verifier that takes the algorithm from the token (RFC 8725 section
    /// 2.1).
    ///
    /// # Panics
    /// When signing fails (never).
    pub fn forge_key_confusion(&self, form: PublicKeyForm) -> String {
        let key = Arc::clone(self.shared.keys().current(KeyAlg::Rs256));
        let secret = match form {
            PublicKeyForm::Pem => key.public_pem.as_bytes(),
            PublicKeyForm::Der => key.public_der.as_slice(),
        };
        let mut header = Header::new(Algorithm::HS256);
        header.typ = Some(self.typ.clone());
        header.kid = self.header_kid(&key.kid);
        jsonwebtoken::encode(&header, &self.claims, &EncodingKey::from_secret(secret))
            .unwrap_or_else(|err| panic!("signing a test token failed: {err}"))
    }

    /// Forgery: a validly signed token whose payload is then changed by
    /// `edit` (the signature kept).
    ///
    /// # Panics
    /// When signing fails (never with the keys this issuer makes).
    pub fn forge_tampered(&self, edit: impl FnOnce(&mut Map<String, Value>)) -> String {
        let token = self.sign();
        let mut claims = self.claims.clone();
        edit(&mut claims);
        let mut parts = token.split('.');
        let (header, signature) = (parts.next(), parts.nth(1));
        format!(
            "{}.{}.{}",
            header.unwrap_or_default(),
            encode_part(&claims),
            signature.unwrap_or_default()
        )
    }

    /// Forgery: signed by a key of the same alg that is not in the JWKS,
    /// header `kid` that key's own (unknown to the JWKS) unless chosen.
    ///
    /// # Panics
    /// When signing fails (never with the keys this issuer makes).
    pub fn forge_unknown_key(&self) -> String {
        let key = Arc::clone(self.shared.keys().stranger(self.alg));
        let kid = self.header_kid(&key.kid);
        self.sign_with(&key, kid)
            .unwrap_or_else(|err| panic!("signing a test token failed: {err:#}"))
    }

    /// Forgery: signed by a key not in the JWKS, header `kid` that of the
    /// current published key of the same alg (a known kid, the wrong key)
    /// unless chosen.
    ///
    /// # Panics
    /// When signing fails (never with the keys this issuer makes).
    pub fn forge_wrong_key(&self) -> String {
        let (key, kid) = {
            let ring = self.shared.keys();
            (
                Arc::clone(ring.stranger(self.alg)),
                ring.current(self.alg).kid.clone(),
            )
        };
        let kid = self.header_kid(&kid);
        self.sign_with(&key, kid)
            .unwrap_or_else(|err| panic!("signing a test token failed: {err:#}"))
    }

    fn try_sign(&self) -> anyhow::Result<String> {
        let key = Arc::clone(self.shared.keys().current(self.alg));
        self.sign_with(&key, self.header_kid(&key.kid))
    }

    fn sign_with(&self, key: &Key, kid: Option<String>) -> anyhow::Result<String> {
        let mut header = Header::new(key.alg.algorithm());
        header.typ = Some(self.typ.clone());
        header.kid = kid;
        Ok(jsonwebtoken::encode(&header, &self.claims, &key.encoding)?)
    }

    fn header_kid(&self, signing: &str) -> Option<String> {
        match &self.kid {
            KidChoice::Signing => Some(signing.to_owned()),
            KidChoice::Override(kid) => Some(kid.clone()),
            KidChoice::Omit => None,
        }
    }
}

/// A command to the server thread.
enum Control {
    /// Start or stop listening; `done` gets the outcome.
    Listen {
        listening: bool,
        done: oneshot::Sender<anyhow::Result<()>>,
    },
}

/// One key pair of the issuer.
struct Key {
    /// RFC 7638 thumbprint (SHA-256) of the public JWK.
    kid: String,
    alg: KeyAlg,
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// The public JWK with `kid`, `alg` and `use: sig`.
    jwk: Jwk,
    /// SubjectPublicKeyInfo, PEM.
    public_pem: String,
    /// SubjectPublicKeyInfo, DER.
    public_der: Vec<u8>,
}

impl Key {
    /// A new key pair from `openssl genpkey` (PKCS#8 PEM). Blocking.
    fn generate(alg: KeyAlg) -> anyhow::Result<Self> {
        let args: &[&str] = match alg {
            KeyAlg::Rs256 => &[
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ],
            KeyAlg::Es256 => &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ],
        };
        let private = openssl(args, None)?;
        let public_pem = String::from_utf8(openssl(&["pkey", "-pubout"], Some(&private))?)
            .context("openssl wrote a public key that is not text")?;
        let public_der = pem_body(&public_pem)?;
        let encoding = match alg {
            KeyAlg::Rs256 => EncodingKey::from_rsa_pem(&private)?,
            KeyAlg::Es256 => EncodingKey::from_ec_pem(&private)?,
        };
        let mut jwk = Jwk::from_encoding_key(&encoding, alg.algorithm())?;
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        let kid = jwk.thumbprint(ThumbprintHash::SHA256);
        jwk.common.key_id = Some(kid.clone());
        let decoding = DecodingKey::from_jwk(&jwk)?;
        Ok(Self {
            kid,
            alg,
            encoding,
            decoding,
            jwk,
            public_pem,
            public_der,
        })
    }
}

/// The issuer's keys.
struct KeyRing {
    /// What the JWKS serves, oldest first.
    published: Vec<Arc<Key>>,
    /// The keys signing RS256 and ES256 tokens now (published unless
    /// retired).
    current_rs: Arc<Key>,
    current_es: Arc<Key>,
    /// Keys never published, for forgeries.
    stranger_rs: Arc<Key>,
    stranger_es: Arc<Key>,
}

impl KeyRing {
    /// Four fresh keys, the RSA ones made in parallel. Blocking.
    fn generate() -> anyhow::Result<Self> {
        std::thread::scope(|scope| {
            let current_rs = scope.spawn(|| Key::generate(KeyAlg::Rs256));
            let stranger_rs = scope.spawn(|| Key::generate(KeyAlg::Rs256));
            let current_es = Arc::new(Key::generate(KeyAlg::Es256)?);
            let stranger_es = Arc::new(Key::generate(KeyAlg::Es256)?);
            let joined = |handle: std::thread::ScopedJoinHandle<'_, anyhow::Result<Key>>| {
                handle
                    .join()
                    .map_err(|_| anyhow!("key generation panicked"))?
                    .map(Arc::new)
            };
            let current_rs = joined(current_rs)?;
            let stranger_rs = joined(stranger_rs)?;
            Ok(Self {
                published: vec![Arc::clone(&current_rs), Arc::clone(&current_es)],
                current_rs,
                current_es,
                stranger_rs,
                stranger_es,
            })
        })
    }

    fn current(&self, alg: KeyAlg) -> &Arc<Key> {
        match alg {
            KeyAlg::Rs256 => &self.current_rs,
            KeyAlg::Es256 => &self.current_es,
        }
    }

    fn stranger(&self, alg: KeyAlg) -> &Arc<Key> {
        match alg {
            KeyAlg::Rs256 => &self.stranger_rs,
            KeyAlg::Es256 => &self.stranger_es,
        }
    }
}

/// An opaque token registered by the test.
struct Opaque {
    active: bool,
    claims: Map<String, Value>,
}

/// What the test's handle and the HTTP handlers share.
struct Shared {
    /// `http://127.0.0.1:PORT[PATH]`.
    issuer: String,
    /// `[PATH]`: empty, or `/` and segments without a final `/`.
    path: String,
    discovery: Discovery,
    client_id: String,
    client_secret: String,
    scopes_supported: Vec<String>,
    /// Written by rotation and retirement, read by every signing and JWKS
    /// request; held for no more than a clone or a push.
    keys: Mutex<KeyRing>,
    /// Opaque tokens by value. Unbounded: only the test adds to it, a few
    /// tokens per test.
    opaque: Mutex<HashMap<String, Opaque>>,
    /// Set by [`TestIssuer::set_down`], read by every handler.
    down: AtomicBool,
    jwks_fetches: AtomicU64,
    metadata_fetches: AtomicU64,
    introspections: AtomicU64,
    token_requests: AtomicU64,
    token_exchanges: AtomicU64,
    /// The subject tokens exchanged, in order. Unbounded: a test makes a
    /// few.
    exchanged: Mutex<Vec<String>>,
    exchanged_lifetime_secs: i64,
    /// Makes each token's `jti` unique within this issuer.
    next_jti: AtomicU64,
}

impl Shared {
    fn keys(&self) -> MutexGuard<'_, KeyRing> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn opaque(&self) -> MutexGuard<'_, HashMap<String, Opaque>> {
        self.opaque.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    fn oauth_metadata_path(&self) -> String {
        format!("/.well-known/oauth-authorization-server{}", self.path)
    }

    fn openid_inserted_path(&self) -> String {
        format!("/.well-known/openid-configuration{}", self.path)
    }

    fn openid_appended_path(&self) -> String {
        format!("{}/.well-known/openid-configuration", self.path)
    }

    /// The paths serving a metadata document, without repeats (inserted
    /// and appended OpenID paths are one for a root issuer).
    fn metadata_paths(&self) -> Vec<String> {
        let mut paths = match self.discovery {
            Discovery::All => vec![
                self.oauth_metadata_path(),
                self.openid_inserted_path(),
                self.openid_appended_path(),
            ],
            Discovery::OAuth => vec![self.oauth_metadata_path()],
            Discovery::OpenId => vec![self.openid_inserted_path(), self.openid_appended_path()],
            Discovery::OpenIdAppended => vec![self.openid_appended_path()],
        };
        paths.dedup();
        paths
    }

    /// The metadata document (RFC 8414 section 2; OpenID Connect Discovery
    /// 1.0 section 3 adds the members marked REQUIRED there).
    /// `authorization_endpoint` is named (clients' schemas require it) but
    /// not served: this issuer has no interactive login.
    fn metadata(&self, openid: bool) -> Value {
        let issuer = &self.issuer;
        let mut doc = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "jwks_uri": format!("{issuer}/jwks"),
            "introspection_endpoint": format!("{issuer}/introspect"),
            "scopes_supported": self.scopes_supported,
            "response_types_supported": ["code"],
            "grant_types_supported": ["client_credentials", TOKEN_EXCHANGE_GRANT],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "introspection_endpoint_auth_methods_supported": ["client_secret_basic"],
        });
        if openid && let Value::Object(doc) = &mut doc {
            doc.insert("subject_types_supported".into(), json!(["public"]));
            doc.insert(
                "id_token_signing_alg_values_supported".into(),
                json!(["RS256", "ES256"]),
            );
        }
        doc
    }

    fn jwks(&self) -> JwkSet {
        JwkSet {
            keys: self
                .keys()
                .published
                .iter()
                .map(|k| k.jwk.clone())
                .collect(),
        }
    }

    fn register_opaque(&self, active: bool, claims: Map<String, Value>) -> String {
        let token = format!(
            "opaque-{:016x}{:016x}",
            fastrand::u64(..),
            fastrand::u64(..)
        );
        self.opaque()
            .insert(token.clone(), Opaque { active, claims });
        token
    }

    /// The RFC 7662 answer for `token`: a registered opaque token, or a
    /// JWT this issuer signed with a published key, valid now.
    fn introspect(&self, token: &str) -> Value {
        let claims = match self.opaque().get(token) {
            Some(entry) if entry.active && in_time(&entry.claims) => Some(entry.claims.clone()),
            Some(_) => None,
            None => self.verify(token),
        };
        match claims {
            Some(claims) => {
                let mut answer = Map::new();
                answer.insert("active".into(), true.into());
                answer.extend(claims);
                Value::Object(answer)
            }
            None => json!({"active": false}),
        }
    }

    /// The claims of a JWT signed by a published key, from this issuer, in
    /// its validity period.
    fn verify(&self, token: &str) -> Option<Map<String, Value>> {
        let kid = jsonwebtoken::decode_header(token).ok()?.kid?;
        let key = {
            let ring = self.keys();
            Arc::clone(ring.published.iter().find(|key| key.kid == kid)?)
        };
        let mut validation = Validation::new(key.alg.algorithm());
        validation.validate_aud = false;
        validation.validate_nbf = true;
        validation.leeway = 0;
        validation.set_issuer(&[&self.issuer]);
        validation.set_required_spec_claims(&["exp", "iss"]);
        jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
            .ok()
            .map(|data| data.claims)
    }

    /// Whether the request authenticates the configured client: HTTP Basic
    /// (RFC 6749 section 2.3.1; the id and secret form-urlencoded or not),
    /// or, when `form` is given, `client_id` and `client_secret` in it.
    fn client_authenticated(
        &self,
        req: &HttpRequest,
        form: Option<&HashMap<String, String>>,
    ) -> bool {
        let matches = |id: &str, secret: &str| id == self.client_id && secret == self.client_secret;
        if let Some((id, secret)) = basic_credentials(req) {
            let decoded = form_decode(&id).zip(form_decode(&secret));
            return matches(&id, &secret)
                || decoded.is_some_and(|(id, secret)| matches(&id, &secret));
        }
        form.and_then(|form| form.get("client_id").zip(form.get("client_secret")))
            .is_some_and(|(id, secret)| matches(id, secret))
    }
}

/// Runs the HTTP server on its own actix system until the control channel
/// closes; `started` gets whether the first start worked.
fn run_server(
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    addr: SocketAddr,
    mut control: mpsc::Receiver<Control>,
    started: oneshot::Sender<anyhow::Result<()>>,
) {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let mut running = match serve(&shared, listener) {
            Ok(handle) => {
                let _ = started.send(Ok(()));
                Some(handle)
            }
            Err(err) => {
                let _ = started.send(Err(err));
                return;
            }
        };
        while let Some(Control::Listen { listening, done }) = control.recv().await {
            let outcome = match (listening, running.take()) {
                (true, None) => rebind(&shared, addr).await.map(|handle| {
                    running = Some(handle);
                }),
                (true, Some(handle)) => {
                    running = Some(handle);
                    Ok(())
                }
                (false, Some(handle)) => {
                    handle.stop(false).await;
                    Ok(())
                }
                (false, None) => Ok(()),
            };
            let _ = done.send(outcome);
        }
        if let Some(handle) = running {
            handle.stop(false).await;
        }
    });
}

/// Binds `addr` again, retrying while the old listening socket closes.
async fn rebind(shared: &Arc<Shared>, addr: SocketAddr) -> anyhow::Result<ServerHandle> {
    let mut attempt = 0;
    loop {
        match std::net::TcpListener::bind(addr) {
            Ok(listener) => return serve(shared, listener),
            Err(err) if attempt + 1 >= REBIND_ATTEMPTS => {
                return Err(err).with_context(|| format!("listening on {addr} again"));
            }
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(REBIND_PAUSE).await;
            }
        }
    }
}

/// Starts an actix server on `listener` (one worker), on the current actix
/// system, and returns its handle.
fn serve(shared: &Arc<Shared>, listener: std::net::TcpListener) -> anyhow::Result<ServerHandle> {
    let data = web::Data::from(Arc::clone(shared));
    let server = HttpServer::new(move || {
        let mut app = App::new()
            .app_data(data.clone())
            .app_data(web::PayloadConfig::new(MAX_FORM_BYTES));
        for path in data.metadata_paths() {
            app = app.route(&path, web::get().to(metadata));
        }
        let path = &data.path;
        app.route(&format!("{path}/jwks"), web::get().to(jwks))
            .route(&format!("{path}/introspect"), web::post().to(introspect))
            .route(&format!("{path}/token"), web::post().to(token))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(0)
    .listen(listener)?
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    Ok(handle)
}

/// `GET` a metadata document.
async fn metadata(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    shared.metadata_fetches.fetch_add(1, Ordering::SeqCst);
    if shared.is_down() {
        return unavailable();
    }
    let openid = req.path().contains("/openid-configuration");
    HttpResponse::Ok().json(shared.metadata(openid))
}

/// `GET [PATH]/jwks`.
async fn jwks(shared: web::Data<Shared>) -> HttpResponse {
    shared.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    if shared.is_down() {
        return unavailable();
    }
    HttpResponse::Ok().json(shared.jwks())
}

/// `POST [PATH]/introspect` (RFC 7662 section 2): HTTP Basic client
/// authentication, form `token=…`.
async fn introspect(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    shared.introspections.fetch_add(1, Ordering::SeqCst);
    if shared.is_down() {
        return unavailable();
    }
    if !shared.client_authenticated(&req, None) {
        return invalid_client();
    }
    let Some(token) = parse_form(&body).and_then(|mut form| form.remove("token")) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request");
    };
    no_store(StatusCode::OK).json(shared.introspect(&token))
}

/// `POST [PATH]/token`: the client credentials grant (RFC 6749 section
/// 4.4), `resource` (RFC 8707) as `aud`, `scope` checked against
/// `scopes_supported`.
async fn token(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    shared.token_requests.fetch_add(1, Ordering::SeqCst);
    if shared.is_down() {
        return unavailable();
    }
    let Some(form) = parse_form(&body) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request");
    };
    if !shared.client_authenticated(&req, Some(&form)) {
        return invalid_client();
    }
    let exchange = match form.get("grant_type").map(String::as_str) {
        Some("client_credentials") => false,
        Some(TOKEN_EXCHANGE_GRANT) => true,
        Some(_) => return oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type"),
        None => return oauth_error(StatusCode::BAD_REQUEST, "invalid_request"),
    };
    let scopes: Vec<&str> = form
        .get("scope")
        .map(|s| s.split_whitespace().collect())
        .unwrap_or_default();
    if !shared.scopes_supported.is_empty()
        && !scopes
            .iter()
            .all(|s| shared.scopes_supported.iter().any(|k| k == s))
    {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_scope");
    }
    let client_id = shared.client_id.clone();
    // Token exchange (RFC 8693 section 2.1): the subject token must be an
    // access token of this issuer's, valid now; the new one acts for its
    // subject, the exchanging client its actor.
    let mut lifetime = DEFAULT_LIFETIME_SECS;
    let subject = if exchange {
        let (Some(token), Some(ACCESS_TOKEN_TYPE)) = (
            form.get("subject_token"),
            form.get("subject_token_type").map(String::as_str),
        ) else {
            return oauth_error(StatusCode::BAD_REQUEST, "invalid_request");
        };
        let claims = shared.introspect(token);
        let Some(sub) = claims["sub"].as_str().filter(|_| claims["active"] == true) else {
            return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant");
        };
        let left = claims["exp"].as_i64().map_or(lifetime, |exp| exp - now());
        lifetime = shared.exchanged_lifetime_secs.min(left);
        shared
            .exchanged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(token.clone());
        sub.to_owned()
    } else {
        client_id.clone()
    };
    let shared = shared.into_inner();
    let mut builder = TokenBuilder::new(Arc::clone(&shared))
        .subject(subject)
        .client_id(client_id.clone())
        .expires_in(lifetime);
    if exchange {
        builder = builder.claim("act", json!({ "sub": client_id }));
    }
    if let Some(resource) = form.get("resource").or_else(|| form.get("audience")) {
        builder = builder.audience(resource.clone());
    }
    if !scopes.is_empty() {
        builder = builder.scopes(scopes.iter().copied());
    }
    let Ok(access_token) = builder.try_sign() else {
        return oauth_error(StatusCode::INTERNAL_SERVER_ERROR, "server_error");
    };
    let mut answer = json!({
        "access_token": access_token,
        "token_type": "Bearer",
        "expires_in": lifetime,
    });
    if exchange {
        shared.token_exchanges.fetch_add(1, Ordering::SeqCst);
        if let Value::Object(answer) = &mut answer {
            answer.insert("issued_token_type".into(), ACCESS_TOKEN_TYPE.into());
        }
    }
    if !scopes.is_empty()
        && let Value::Object(answer) = &mut answer
    {
        answer.insert("scope".into(), scopes.join(" ").into());
    }
    no_store(StatusCode::OK).json(answer)
}

/// 503 with `Retry-After: 1`, as an identity provider under maintenance.
fn unavailable() -> HttpResponse {
    HttpResponse::ServiceUnavailable()
        .insert_header(("Retry-After", "1"))
        .json(json!({"error": "temporarily_unavailable"}))
}

/// 401 `invalid_client` with a Basic challenge (RFC 6749 section 5.2).
fn invalid_client() -> HttpResponse {
    no_store(StatusCode::UNAUTHORIZED)
        .insert_header(("WWW-Authenticate", "Basic realm=\"test-issuer\""))
        .json(json!({"error": "invalid_client"}))
}

fn oauth_error(status: StatusCode, error: &str) -> HttpResponse {
    no_store(status).json(json!({"error": error}))
}

/// A response builder with `Cache-Control: no-store` (RFC 6749 section
/// 5.1, for answers that carry or describe tokens).
fn no_store(status: StatusCode) -> actix_web::HttpResponseBuilder {
    let mut builder = HttpResponse::build(status);
    builder.insert_header(("Cache-Control", "no-store"));
    builder
}

/// The id and secret of an `Authorization: Basic` header, as sent.
fn basic_credentials(req: &HttpRequest) -> Option<(String, String)> {
    let value = req.headers().get("authorization")?.to_str().ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((id.to_owned(), secret.to_owned()))
}

/// An `application/x-www-form-urlencoded` body; `None` if not UTF-8 or
/// badly escaped. A repeated name keeps its last value.
fn parse_form(body: &[u8]) -> Option<HashMap<String, String>> {
    let body = std::str::from_utf8(body).ok()?;
    body.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((form_decode(name)?, form_decode(value)?))
        })
        .collect()
}

/// Undoes form-urlencoding: `+` is a space, `%XX` a byte.
fn form_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.bytes();
    while let Some(byte) = rest.next() {
        match byte {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hex = [rest.next()?, rest.next()?];
                let hex = std::str::from_utf8(&hex).ok()?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
            }
            _ => bytes.push(byte),
        }
    }
    String::from_utf8(bytes).ok()
}

/// `path` checked plain and without a final `/`; empty stays empty.
fn plain_path(path: &str) -> anyhow::Result<String> {
    let path = path.trim_end_matches('/');
    if path.is_empty() {
        return Ok(String::new());
    }
    let plain = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._~/".contains(c));
    if !path.starts_with('/') || !plain || path.contains("//") {
        bail!("issuer path {path:?}: expected `/` and plain segments, e.g. /realms/test");
    }
    Ok(path.to_owned())
}

/// Runs `openssl` with `args`, `input` on stdin; returns its stdout.
/// Blocking.
fn openssl(args: &[&str], input: Option<&[u8]>) -> anyhow::Result<Vec<u8>> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running openssl: install the openssl CLI (e.g. apt-get install openssl)")?;
    if let Some(input) = input {
        // A key is far smaller than a pipe's buffer: this write cannot
        // block on the child's full stdout. Dropping stdin closes it.
        let mut stdin = child.stdin.take().context("no stdin for openssl")?;
        stdin.write_all(input)?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(output.stdout)
}

/// The bytes of a PEM document (its base64 lines decoded).
fn pem_body(pem: &str) -> anyhow::Result<Vec<u8>> {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    STANDARD.decode(body).context("PEM body is not base64")
}

/// One part of a compact JWS: base64url (no padding) of the JSON.
fn encode_part(part: &Map<String, Value>) -> String {
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(part).unwrap_or_default())
}

/// Whether `exp` has not passed and `nbf` (if any) has.
fn in_time(claims: &Map<String, Value>) -> bool {
    let now = now();
    let exp_ok = claims
        .get("exp")
        .and_then(Value::as_i64)
        .is_none_or(|exp| exp > now);
    let nbf_ok = claims
        .get("nbf")
        .and_then(Value::as_i64)
        .is_none_or(|nbf| nbf <= now);
    exp_ok && nbf_ok
}

/// Seconds since the Unix epoch.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_bodies_are_decoded() {
        let form = parse_form(b"token=a%2Bb+c&token_type_hint=access_token&empty").unwrap();
        assert_eq!(form["token"], "a+b c");
        assert_eq!(form["token_type_hint"], "access_token");
        assert_eq!(form["empty"], "");
        assert!(parse_form(b"token=%zz").is_none());
        assert!(parse_form(b"token=%4").is_none());
    }

    #[test]
    fn issuer_paths_must_be_plain() {
        assert_eq!(plain_path("").unwrap(), "");
        assert_eq!(plain_path("/realms/test/").unwrap(), "/realms/test");
        assert!(plain_path("realms").is_err());
        assert!(plain_path("/realms/{id}").is_err());
        assert!(plain_path("/a//b").is_err());
    }
}
