//! [`Issuer`]: one authorization server's metadata and signing keys,
//! discovered (RFC 8414, then OpenID Connect Discovery), cached, and
//! fetched again when they age or a token names a key not seen yet.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use jsonwebtoken::jwk::{JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use reqwest::Url;
use serde::Deserialize;
use tokio::time::Instant;

use crate::error::{AuthError, Rejection};

/// Largest metadata or JWKS document read, in bytes: an authorization
/// server is trusted, but a misconfigured URL must not fill memory.
const MAX_DOCUMENT: usize = 1 << 20;

/// What the resource server uses of an authorization server's metadata.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Metadata {
    pub(crate) issuer: String,
    pub(crate) jwks_uri: Option<String>,
    pub(crate) introspection_endpoint: Option<String>,
}

/// One signing key of an issuer.
struct Key {
    kid: Option<String>,
    /// The key's `alg`, when the JWK names one: tokens must use it.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

/// The keys of one fetch.
struct KeySet {
    fetched: Instant,
    keys: Vec<Key>,
}

impl KeySet {
    /// The keys that may have signed a token with `kid` and `alg`.
    fn candidates(&self, kid: Option<&str>, alg: Algorithm) -> Vec<DecodingKey> {
        self.keys
            .iter()
            .filter(|k| match kid {
                Some(kid) => k.kid.as_deref() == Some(kid),
                None => true,
            })
            .filter(|k| k.alg.is_none_or(|a| a == alg))
            .filter(|k| k.key.family() == alg.family())
            .map(|k| k.key.clone())
            .collect()
    }
}

/// Fetch state, behind the single-flight lock.
#[derive(Default)]
struct Fetching {
    /// When the last fetch was tried (successful or not).
    last_attempt: Option<Instant>,
    metadata: Option<Metadata>,
}

/// An authorization server trusted to issue tokens for this resource.
pub(crate) struct Issuer {
    /// Its `issuer` identifier, exactly as configured.
    pub(crate) id: String,
    http: reqwest::Client,
    cache_for: Duration,
    refresh_min: Duration,
    keys: RwLock<Option<Arc<KeySet>>>,
    /// One fetch at a time; callers that waited use its result.
    fetching: tokio::sync::Mutex<Fetching>,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer").field("id", &self.id).finish()
    }
}

impl Issuer {
    pub(crate) fn new(
        id: String,
        http: reqwest::Client,
        cache_for: Duration,
        refresh_min: Duration,
    ) -> Self {
        Self {
            id,
            http,
            cache_for,
            refresh_min,
            keys: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(Fetching::default()),
        }
    }

    /// The keys that may verify a token signed with `alg` under `kid`.
    ///
    /// # Errors
    /// [`Rejection::UnknownKey`] when no key matches, even after fetching
    /// the keys again; [`AuthError::Unavailable`] when the issuer's keys
    /// could never be fetched.
    pub(crate) async fn keys_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Vec<DecodingKey>, AuthError> {
        let current = self.current();
        if let Some(set) = &current {
            let found = set.candidates(kid, alg);
            if !found.is_empty() && set.fetched.elapsed() < self.cache_for {
                return Ok(found);
            }
        }
        // Unknown key (rotation?) or aged keys: fetch again, at most once
        // per `refresh_min`. Aged keys stay in use while the issuer is down.
        let seen = current.as_ref().map(|s| s.fetched);
        match self.refresh(seen).await {
            Ok(set) => match set.candidates(kid, alg) {
                found if found.is_empty() => Err(AuthError::Invalid(Rejection::UnknownKey)),
                found => Ok(found),
            },
            Err(err) => match current {
                Some(set) => match set.candidates(kid, alg) {
                    found if found.is_empty() => Err(AuthError::Invalid(Rejection::UnknownKey)),
                    found => Ok(found),
                },
                None => Err(err),
            },
        }
    }

    /// The issuer's metadata (fetched once, then kept).
    ///
    /// # Errors
    /// [`AuthError::Unavailable`].
    pub(crate) async fn metadata(&self) -> Result<Metadata, AuthError> {
        let mut fetching = self.fetching.lock().await;
        if let Some(metadata) = &fetching.metadata {
            return Ok(metadata.clone());
        }
        let metadata = self.discover().await?;
        fetching.metadata = Some(metadata.clone());
        Ok(metadata)
    }

    fn current(&self) -> Option<Arc<KeySet>> {
        self.keys.read().ok().and_then(|k| k.clone())
    }

    /// Fetches the keys again unless another caller did since `seen` (the
    /// fetch time of the set the caller looked at), or a fetch was tried
    /// less than `refresh_min` ago.
    async fn refresh(&self, seen: Option<Instant>) -> Result<Arc<KeySet>, AuthError> {
        let mut fetching = self.fetching.lock().await;
        if let Some(set) = self.current()
            && Some(set.fetched) != seen
        {
            return Ok(set);
        }
        if let Some(last) = fetching.last_attempt
            && last.elapsed() < self.refresh_min
        {
            return match self.current() {
                Some(set) => Ok(set),
                None => Err(AuthError::Unavailable(format!(
                    "the keys of {} could not be fetched; retrying shortly",
                    self.id
                ))),
            };
        }
        fetching.last_attempt = Some(Instant::now());
        let fetched = self.fetch_keys(&mut fetching).await;
        let outcome = if fetched.is_ok() { "ok" } else { "failed" };
        mcp_cluster_telemetry::metrics::metrics()
            .auth_jwks_fetches
            .with_label_values(&[outcome])
            .inc();
        let set = fetched.inspect_err(|err| {
            tracing::warn!(issuer = %self.id, error = err.for_log(), "Fetching the issuer's keys failed.");
        })?;
        let set = Arc::new(set);
        if let Ok(mut keys) = self.keys.write() {
            *keys = Some(Arc::clone(&set));
        }
        Ok(set)
    }

    async fn fetch_keys(&self, fetching: &mut Fetching) -> Result<KeySet, AuthError> {
        let metadata = match &fetching.metadata {
            Some(m) => m.clone(),
            None => {
                let m = self.discover().await?;
                fetching.metadata = Some(m.clone());
                m
            }
        };
        let jwks_uri = metadata.jwks_uri.as_deref().ok_or_else(|| {
            AuthError::Unavailable(format!("the metadata of {} has no jwks_uri", self.id))
        })?;
        let set: JwkSet = get_json(&self.http, jwks_uri).await?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
                continue;
            }
            // Symmetric (`oct`) keys are never used: a token verified with
            // one could have been made by anyone who knows it.
            if matches!(
                jwk.algorithm,
                jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
            ) {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let alg = jwk
                .common
                .key_algorithm
                .and_then(|a| a.to_string().parse::<Algorithm>().ok());
            keys.push(Key {
                kid: jwk.common.key_id.clone(),
                alg,
                key,
            });
        }
        tracing::debug!(issuer = %self.id, keys = keys.len(), "Issuer keys fetched.");
        Ok(KeySet {
            fetched: Instant::now(),
            keys,
        })
    }

    /// Finds the metadata: RFC 8414 (the well-known path inserted before
    /// the issuer's path), then OpenID Connect Discovery (inserted, then
    /// appended), as MCP clients look for it. The document must name this
    /// issuer exactly (RFC 8414 section 3.3).
    async fn discover(&self) -> Result<Metadata, AuthError> {
        let mut last = String::new();
        for url in discovery_urls(&self.id)? {
            match get_json::<Metadata>(&self.http, url.as_str()).await {
                Ok(metadata) if metadata.issuer == self.id => return Ok(metadata),
                Ok(metadata) => {
                    last = format!(
                        "{url} names the issuer {}, not {}",
                        metadata.issuer, self.id
                    );
                }
                Err(AuthError::Unavailable(err)) => last = err,
                Err(err) => last = err.to_string(),
            }
        }
        Err(AuthError::Unavailable(format!(
            "no metadata found for {}: {last}",
            self.id
        )))
    }
}

/// Where the metadata of `issuer` may be, in the order tried.
pub(crate) fn discovery_urls(issuer: &str) -> Result<Vec<Url>, AuthError> {
    let base = Url::parse(issuer)
        .map_err(|err| AuthError::Unavailable(format!("issuer {issuer}: {err}")))?;
    let path = base.path().trim_end_matches('/').to_owned();
    let with = |well_known: &str| {
        let mut url = base.clone();
        url.set_path(&format!("/.well-known/{well_known}{path}"));
        url
    };
    let mut urls = vec![
        with("oauth-authorization-server"),
        with("openid-configuration"),
    ];
    if !path.is_empty() {
        let mut appended = base.clone();
        appended.set_path(&format!("{path}/.well-known/openid-configuration"));
        urls.push(appended);
    }
    Ok(urls)
}

/// GETs a JSON document of at most [`MAX_DOCUMENT`] bytes.
pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<T, AuthError> {
    let unavailable = |what: String| AuthError::Unavailable(format!("{url}: {what}"));
    let response = http
        .get(url)
        .header("Accept", "application/json")
        .send()
        .await
        .map_err(|err| unavailable(without_url(&err)))?;
    read_json(response, url).await
}

/// Reads a JSON answer of at most [`MAX_DOCUMENT`] bytes.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    mut response: reqwest::Response,
    url: &str,
) -> Result<T, AuthError> {
    let unavailable = |what: String| AuthError::Unavailable(format!("{url}: {what}"));
    if !response.status().is_success() {
        return Err(unavailable(format!("HTTP {}", response.status())));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| unavailable(without_url(&err)))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT {
            return Err(unavailable(format!("larger than {MAX_DOCUMENT} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body)
        .map_err(|err| unavailable(format!("not the JSON expected: {err}")))
}

/// A reqwest error without the URL (the caller names it).
fn without_url(err: &reqwest::Error) -> String {
    let mut text = if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_inserts_the_well_known_path_before_the_issuer_path() {
        let urls: Vec<String> = discovery_urls("https://idp.example/realms/a")
            .unwrap()
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(
            urls,
            [
                "https://idp.example/.well-known/oauth-authorization-server/realms/a",
                "https://idp.example/.well-known/openid-configuration/realms/a",
                "https://idp.example/realms/a/.well-known/openid-configuration",
            ]
        );
        let urls: Vec<String> = discovery_urls("https://idp.example/")
            .unwrap()
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(
            urls,
            [
                "https://idp.example/.well-known/oauth-authorization-server",
                "https://idp.example/.well-known/openid-configuration",
            ]
        );
    }
}
