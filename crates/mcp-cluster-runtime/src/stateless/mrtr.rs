//! Input-required round trips (MRTR, 2026-07-28): the sealed `requestState`
//! and the key ring that seals it.
//!
//! A handler that asks the client (sampling, elicitation, roots) in the
//! stateless era does not wait: the question goes back in an
//! `input_required` result, with the answers gathered so far sealed into
//! `requestState`. The client's retry brings the state and the new answers;
//! any node opens the state and runs the handler again, which now finds its
//! answers. The state is authenticated encryption (AES-256-GCM): a client
//! can neither read nor change it. It names the principal it was issued to,
//! the request it belongs to (method and a digest of its params) and when
//! it expires; each state is accepted once.
//!
//! Wire form: `v1.<key id>.<base64url(nonce ‖ ciphertext ‖ tag)>`. The key
//! ring seals with its newest key and opens with any key it holds, so a
//! rotation never fails a retry in flight: an old key stays until every
//! state it sealed has expired.

use std::sync::RwLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::node::config::RuntimeConfig;

/// Bytes of a key.
pub const KEY_LEN: usize = 32;

/// The version prefix of the wire form.
const PREFIX: &str = "v1";

/// Bound into every seal, so a ciphertext made for something else with the
/// same key never opens as a request state.
const AAD: &[u8] = b"mcp-request-state-v1";

/// The longest `requestState` accepted (a state carries the answers of
/// earlier rounds; the body limit bounds it too).
pub const MAX_STATE_BYTES: usize = 256 * 1024;

/// One key of the ring: an id (carried in the wire form) and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct StateKey {
    /// Short id, `[A-Za-z0-9_-]{1,32}`.
    pub id: String,
    /// The AES-256 key.
    pub secret: [u8; KEY_LEN],
}

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl StateKey {
    /// A fresh random key named `id`.
    ///
    /// # Panics
    /// When the system's random source fails.
    pub fn random(id: impl Into<String>) -> Self {
        let mut secret = [0u8; KEY_LEN];
        #[allow(clippy::expect_used)]
        SystemRandom::new()
            .fill(&mut secret)
            .expect("the system random source failed");
        Self {
            id: id.into(),
            secret,
        }
    }

    /// Parses `<id>:<base64 secret>` (standard or URL-safe base64 of 32
    /// bytes), the form configuration and the store use.
    ///
    /// # Errors
    /// What is wrong, for the operator.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (id, secret) = text
            .trim()
            .split_once(':')
            .ok_or("a request-state key is <id>:<base64 of 32 bytes>")?;
        if id.is_empty()
            || id.len() > 32
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(format!(
                "request-state key id {id:?}: 1-32 letters, digits, '_' or '-'"
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(secret)
            .or_else(|_| URL_SAFE_NO_PAD.decode(secret.trim_end_matches('=')))
            .map_err(|_| format!("request-state key {id}: the secret is not base64"))?;
        let secret: [u8; KEY_LEN] = bytes.try_into().map_err(|b: Vec<u8>| {
            format!(
                "request-state key {id}: the secret is {} bytes, not {KEY_LEN}",
                b.len()
            )
        })?;
        Ok(Self {
            id: id.to_owned(),
            secret,
        })
    }

    /// The `<id>:<base64>` form.
    pub fn encode(&self) -> String {
        format!(
            "{}:{}",
            self.id,
            base64::engine::general_purpose::STANDARD.encode(self.secret)
        )
    }
}

struct Sealer {
    id: String,
    key: LessSafeKey,
}

impl Sealer {
    fn new(key: &StateKey) -> Self {
        // unwrap: the length is AES-256's by construction.
        #[allow(clippy::unwrap_used)]
        let unbound = UnboundKey::new(&AES_256_GCM, &key.secret).unwrap();
        Self {
            id: key.id.clone(),
            key: LessSafeKey::new(unbound),
        }
    }
}

/// The keys a node seals and opens request states with: the first seals,
/// all open. Replaced whole on rotation.
pub struct KeyRing {
    keys: RwLock<Vec<Sealer>>,
    random: SystemRandom,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("keys", &self.ids())
            .finish()
    }
}

impl KeyRing {
    /// A ring of `keys`, the first one sealing. Empty: one random key (a
    /// single node, or a cluster whose store shares its ring later).
    pub fn new(keys: &[StateKey]) -> Self {
        let ring = Self {
            keys: RwLock::new(Vec::new()),
            random: SystemRandom::new(),
        };
        if keys.is_empty() {
            ring.replace(&[StateKey::random("local")]);
        } else {
            ring.replace(keys);
        }
        ring
    }

    /// Replaces the keys (rotation): the first seals from now on.
    pub fn replace(&self, keys: &[StateKey]) {
        if keys.is_empty() {
            return;
        }
        let sealers = keys.iter().map(Sealer::new).collect();
        if let Ok(mut held) = self.keys.write() {
            *held = sealers;
        }
    }

    /// The ids held, the sealing key first.
    pub fn ids(&self) -> Vec<String> {
        self.keys
            .read()
            .map(|keys| keys.iter().map(|k| k.id.clone()).collect())
            .unwrap_or_default()
    }

    /// Whether the ring holds key `id`.
    pub fn holds(&self, id: &str) -> bool {
        self.keys
            .read()
            .is_ok_and(|keys| keys.iter().any(|k| k.id == id))
    }

    /// Seals `state`.
    pub(crate) fn seal(&self, state: &RoundState) -> Result<String, StateError> {
        let plain = serde_json::to_vec(state).map_err(|_| StateError::Malformed)?;
        let keys = self.keys.read().map_err(|_| StateError::Malformed)?;
        let sealer = keys.first().ok_or(StateError::UnknownKey)?;
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| StateError::Malformed)?;
        let mut sealed = plain;
        sealer
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                &mut sealed,
            )
            .map_err(|_| StateError::Malformed)?;
        let mut blob = Vec::with_capacity(NONCE_LEN + sealed.len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&sealed);
        Ok(format!(
            "{PREFIX}.{}.{}",
            sealer.id,
            URL_SAFE_NO_PAD.encode(blob)
        ))
    }

    /// Opens a state: authentic, and sealed by a key of the ring. Says
    /// nothing yet of whom or what it is for ([`RoundState::check`]).
    pub(crate) fn open(&self, text: &str) -> Result<RoundState, StateError> {
        if text.len() > MAX_STATE_BYTES {
            return Err(StateError::Malformed);
        }
        let mut parts = text.splitn(3, '.');
        let (Some(PREFIX), Some(id), Some(body)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(StateError::Malformed);
        };
        let blob = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| StateError::Malformed)?;
        if blob.len() < NONCE_LEN + AES_256_GCM.tag_len() {
            return Err(StateError::Malformed);
        }
        let (nonce, sealed) = blob.split_at(NONCE_LEN);
        let keys = self.keys.read().map_err(|_| StateError::Malformed)?;
        let sealer = keys
            .iter()
            .find(|k| k.id == id)
            .ok_or(StateError::UnknownKey)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| StateError::Malformed)?;
        let mut sealed = sealed.to_vec();
        let plain = sealer
            .key
            .open_in_place(nonce, Aad::from(AAD), &mut sealed)
            .map_err(|_| StateError::Tampered)?;
        serde_json::from_slice(plain).map_err(|_| StateError::Malformed)
    }
}

/// The request-state keys `config` names, parsed.
///
/// # Errors
/// The first key that does not parse, said for the operator.
pub fn configured_keys(config: &RuntimeConfig) -> Result<Vec<StateKey>, String> {
    config
        .request_state_keys
        .iter()
        .map(|k| StateKey::parse(k.expose()))
        .collect()
}

impl crate::stateless::Stateless {
    /// Reads the cluster's key ring from the store (adding a fresh key
    /// when it is due for rotation) and seals with its newest key from now
    /// on. Configured keys are never replaced. A failure keeps the ring
    /// held: retries in flight keep working.
    pub(crate) async fn refresh_key_ring(&self) {
        let config = self.config();
        if !config.request_state_keys.is_empty() {
            return;
        }
        let mut read = self.0.ring_read.lock().await;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let fresh = StateKey::random(&id[..12]).encode();
        let rotate = Duration::from_secs(config.request_state_rotate_secs.max(60));
        // A key seals states for `rotate` and opens them until the last
        // one it sealed expired.
        let keep = config.request_state_ttl() + Duration::from_secs(60);
        match self.store().nodes.state_keys(&fresh, rotate, keep).await {
            Ok(keys) => {
                let keys: Vec<StateKey> = keys
                    .iter()
                    .filter_map(|k| StateKey::parse(k).ok())
                    .collect();
                self.key_ring().replace(&keys);
                *read = Some(tokio::time::Instant::now());
            }
            Err(err) => {
                tracing::warn!(error = %err, "Request-state key ring not read from the store; keeping the keys held.");
            }
        }
    }

    /// Before sealing: the ring was read from the store at least once
    /// (a node's own first key would not open on the others).
    pub(crate) async fn ensure_key_ring(&self) {
        if !self.config().request_state_keys.is_empty() {
            return;
        }
        if self.0.ring_read.lock().await.is_none() {
            self.refresh_key_ring().await;
        }
    }

    /// Opens a state; one sealed with a key this node does not hold yet (a
    /// rotation on another node) makes it read the ring again, at most
    /// once a second.
    pub(crate) async fn open_state(&self, text: &str) -> Result<RoundState, StateError> {
        match self.key_ring().open(text) {
            Err(StateError::UnknownKey) if self.config().request_state_keys.is_empty() => {
                let stale = self
                    .0
                    .ring_read
                    .lock()
                    .await
                    .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
                if stale {
                    self.refresh_key_ring().await;
                }
                self.key_ring().open(text)
            }
            other => other,
        }
    }
}

/// What a request state carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RoundState {
    /// Unique per state: what "accepted once" remembers.
    pub(crate) id: String,
    /// Expiry, milliseconds since the Unix epoch.
    pub(crate) exp: u64,
    /// The principal's key it was issued to; empty without authorization.
    pub(crate) sub: String,
    /// The method of the request.
    pub(crate) method: String,
    /// Digest of the request's params (without `_meta`, `inputResponses`
    /// and `requestState`).
    pub(crate) digest: String,
    /// The answers of the earlier rounds, by input key.
    pub(crate) answers: Map<String, Value>,
    /// The run that waits for this round's answers (a service that keeps
    /// its handler running, `McpService::keeps_running_on_input`): its
    /// record's id in the task store. None: the retry runs the handler
    /// again with `answers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<String>,
}

impl RoundState {
    /// A state for the next round of `method` with `params`.
    pub(crate) fn issue(
        method: &str,
        params: Option<&Map<String, Value>>,
        principal: Option<&str>,
        answers: Map<String, Value>,
        ttl: Duration,
    ) -> Self {
        Self {
            id: uuid::Uuid::new_v4().simple().to_string(),
            exp: now_ms().saturating_add(millis(ttl)),
            sub: principal.unwrap_or_default().to_owned(),
            method: method.to_owned(),
            digest: digest(params),
            answers,
            run: None,
        }
    }

    /// Checks that the state belongs to this request of this principal and
    /// has not expired.
    pub(crate) fn check(
        &self,
        method: &str,
        params: Option<&Map<String, Value>>,
        principal: Option<&str>,
    ) -> Result<(), StateError> {
        if self.exp <= now_ms() {
            return Err(StateError::Expired);
        }
        if self.sub != principal.unwrap_or_default() {
            return Err(StateError::Foreign);
        }
        if self.method != method || self.digest != digest(params) {
            return Err(StateError::OtherRequest);
        }
        Ok(())
    }
}

/// Why a `requestState` was refused (JSON-RPC -32602).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not a state this server issued.
    #[error("requestState is malformed")]
    Malformed,
    /// Sealed with a key no longer (or never) held.
    #[error("requestState was sealed with a key this server does not hold")]
    UnknownKey,
    /// Authentication failed: changed after it was issued.
    #[error("requestState failed verification (tampered)")]
    Tampered,
    /// Past its expiry.
    #[error("requestState has expired")]
    Expired,
    /// Issued to another principal.
    #[error("requestState was issued to another principal")]
    Foreign,
    /// Issued for another request (method or params differ).
    #[error("requestState belongs to another request")]
    OtherRequest,
    /// Already used by an earlier retry.
    #[error("requestState was already used")]
    Replayed,
}

/// Whether a parameter is part of the request's identity: not what changes
/// from one round to the next.
fn identifies(key: &str) -> bool {
    !matches!(key, "_meta" | "inputResponses" | "requestState")
}

/// What a request's state will be checked against, kept while its handler
/// runs: the params that identify it, without the `_meta` every request
/// carries (the most of its bytes, not worth a copy per request).
pub(crate) fn identity(params: Option<&Map<String, Value>>) -> Option<Map<String, Value>> {
    params.map(|params| {
        params
            .iter()
            .filter(|(key, _)| identifies(key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    })
}

/// The request's identity for its state: the params without what changes
/// from one round to the next. serde_json's map is ordered, so the text is
/// canonical.
fn digest(params: Option<&Map<String, Value>>) -> String {
    let mut hasher = Sha256::new();
    if let Some(params) = params {
        for (key, value) in params.iter().filter(|(key, _)| identifies(key)) {
            hasher.update(key.as_bytes());
            hasher.update([0]);
            hasher.update(value.to_string().as_bytes());
            hasher.update([0]);
        }
    }
    URL_SAFE_NO_PAD.encode(&hasher.finalize()[..16])
}

/// A duration in whole milliseconds (saturating).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Now, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    fn state(p: &Map<String, Value>) -> RoundState {
        RoundState::issue(
            "tools/call",
            Some(p),
            Some("iss#alice"),
            Map::new(),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn a_sealed_state_opens_with_the_ring_and_checks_its_request() {
        let ring = KeyRing::new(&[StateKey::random("k1")]);
        let p = params(json!({"name": "t", "arguments": {"a": 1}}));
        let sealed = ring.seal(&state(&p)).unwrap();
        let opened = ring.open(&sealed).unwrap();
        assert_eq!(opened, state_like(&opened, &p));
        opened
            .check("tools/call", Some(&p), Some("iss#alice"))
            .unwrap();
        // The retry's own fields do not change the request's identity.
        let mut retry = p.clone();
        retry.insert("inputResponses".into(), json!({"x": 1}));
        retry.insert("requestState".into(), json!(sealed));
        opened
            .check("tools/call", Some(&retry), Some("iss#alice"))
            .unwrap();
        assert_eq!(
            opened.check("tools/call", Some(&p), Some("iss#bob")),
            Err(StateError::Foreign)
        );
        let other = params(json!({"name": "t", "arguments": {"a": 2}}));
        assert_eq!(
            opened.check("tools/call", Some(&other), Some("iss#alice")),
            Err(StateError::OtherRequest)
        );
        assert_eq!(
            opened.check("prompts/get", Some(&p), Some("iss#alice")),
            Err(StateError::OtherRequest)
        );
    }

    #[test]
    fn the_identity_kept_while_a_handler_runs_checks_like_the_whole_params() {
        let p = params(json!({
            "name": "t",
            "arguments": {"a": 1},
            "_meta": {"io.modelcontextprotocol/clientInfo": {"name": "c", "version": "1"}},
            "inputResponses": {"x": 1},
        }));
        let kept = identity(Some(&p)).unwrap();
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["arguments", "name"]);
        let issued = RoundState::issue(
            "tools/call",
            Some(&kept),
            None,
            Map::new(),
            Duration::from_secs(60),
        );
        issued.check("tools/call", Some(&p), None).unwrap();
        assert_eq!(identity(None), None);
    }

    fn state_like(opened: &RoundState, p: &Map<String, Value>) -> RoundState {
        RoundState {
            id: opened.id.clone(),
            exp: opened.exp,
            ..state(p)
        }
    }

    #[test]
    fn any_changed_byte_is_refused() {
        let ring = KeyRing::new(&[StateKey::random("k1")]);
        let sealed = ring.seal(&state(&Map::new())).unwrap();
        let (head, body) = sealed.rsplit_once('.').unwrap();
        let mut bytes = URL_SAFE_NO_PAD.decode(body).unwrap();
        for i in [0, NONCE_LEN, bytes.len() - 1] {
            bytes[i] ^= 1;
            let forged = format!("{head}.{}", URL_SAFE_NO_PAD.encode(&bytes));
            assert_eq!(ring.open(&forged), Err(StateError::Tampered), "byte {i}");
            bytes[i] ^= 1;
        }
        assert_eq!(ring.open("v1.k1.AAAA"), Err(StateError::Malformed));
        assert_eq!(ring.open("garbage"), Err(StateError::Malformed));
        assert_eq!(
            ring.open(&sealed.replacen("k1", "k2", 1)),
            Err(StateError::UnknownKey)
        );
    }

    #[test]
    fn rotation_keeps_opening_states_sealed_with_the_old_key() {
        let old = StateKey::random("old");
        let ring = KeyRing::new(std::slice::from_ref(&old));
        let before = ring.seal(&state(&Map::new())).unwrap();
        ring.replace(&[StateKey::random("new"), old]);
        assert!(ring.open(&before).is_ok());
        let after = ring.seal(&state(&Map::new())).unwrap();
        assert!(after.starts_with("v1.new."));
        // A ring without the old key (another cluster) refuses it.
        let stranger = KeyRing::new(&[StateKey::random("old")]);
        assert_eq!(stranger.open(&before), Err(StateError::Tampered));
    }

    #[test]
    fn expired_states_are_refused() {
        let mut s = state(&Map::new());
        s.exp = now_ms() - 1;
        assert_eq!(
            s.check("tools/call", Some(&Map::new()), Some("iss#alice")),
            Err(StateError::Expired)
        );
    }

    #[test]
    fn keys_parse_from_configuration() {
        let key = StateKey::random("k-1");
        assert_eq!(StateKey::parse(&key.encode()).unwrap(), key);
        assert!(StateKey::parse("nokey").is_err());
        assert!(StateKey::parse("k:AAAA").unwrap_err().contains("3 bytes"));
        assert!(StateKey::parse("bad id:AAAA").is_err());
    }
}
