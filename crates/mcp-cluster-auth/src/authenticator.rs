//! [`Authenticator`]: turns an `Authorization` header into a [`Principal`],
//! or says why not.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use dashmap::DashMap;
use jsonwebtoken::{Algorithm, Validation};
use mcp_cluster_store::Principal;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::bearer::bearer;
use crate::config::{AuthConfig, Checked, CheckedIntrospection, ConfigError};
use crate::error::{AuthError, Rejection};
use crate::introspection_budget::IntrospectionBudget;
use crate::issuer::{Issuer, read_json};
use crate::metadata::ResourceMetadata;
use crate::negative_cache::NegativeCache;

/// A remembered answer about one token.
#[derive(Debug, Clone)]
struct Known {
    /// The principal (introspection answers that refuse a token are in
    /// the [`NegativeCache`]).
    principal: Arc<Principal>,
    /// Unix seconds after which the answer is not used.
    until: u64,
    /// The token's `exp` (Unix seconds), when it has one.
    expires: Option<u64>,
}

/// The resource server: validates bearer tokens against the configured
/// issuers (JWT signatures with their published keys) or an RFC 7662
/// introspection endpoint, and checks scopes. One per node, shared by every
/// worker; cheap to share behind an `Arc`.
pub struct Authenticator {
    config: AuthConfig,
    checked: Checked,
    issuers: Vec<Issuer>,
    introspection: Option<(CheckedIntrospection, reqwest::Client)>,
    /// Answers by SHA-256 of the token: a token's signature is checked (or
    /// the token introspected) once, not per request. At most
    /// `token_cache_entries` entries.
    known: DashMap<[u8; 32], Known>,
    /// Introspection answers that refused a token, by SHA-256 of the
    /// token, for `negative_cache_secs`; at most `negative_cache_entries`.
    refused: NegativeCache,
    /// Which introspection calls this node makes: per client address, in
    /// all, and the reserve of the bound in all for addresses in good
    /// standing (`None` without introspection).
    introspection_calls: Option<IntrospectionBudget>,
    metadata: ResourceMetadata,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("resource", &self.config.resource)
            .field("issuers", &self.issuers)
            .finish_non_exhaustive()
    }
}

/// The claims read from a JWT access token (RFC 9068) or an introspection
/// answer (RFC 7662).
#[derive(Debug, Deserialize)]
struct Claims {
    #[serde(default)]
    active: Option<bool>,
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    aud: Option<OneOrMany>,
    #[serde(default)]
    exp: Option<u64>,
    #[serde(default)]
    nbf: Option<u64>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    azp: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<OneOrMany>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn contains_any(&self, wanted: &[String]) -> bool {
        match self {
            Self::One(s) => wanted.contains(s),
            Self::Many(v) => v.iter().any(|s| wanted.contains(s)),
        }
    }

    fn into_scopes(self) -> Vec<String> {
        match self {
            Self::One(s) => s.split_whitespace().map(str::to_owned).collect(),
            Self::Many(v) => v,
        }
    }
}

/// Unix time in seconds.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Authenticator {
    /// An authenticator for `config`.
    ///
    /// # Errors
    /// The settings cannot work (see [`AuthConfig::validate`]), or the CA
    /// file is not PEM.
    pub fn new(config: AuthConfig) -> Result<Self, ConfigError> {
        crate::verify::install();
        let checked = config.check()?;
        let mut builder = reqwest::Client::builder()
            .timeout(checked.http_timeout)
            .connect_timeout(checked.http_timeout)
            // Metadata and keys come from the configured URLs only.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("mcp-node/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).map_err(|err| ConfigError {
                setting: "ca_file",
                problem: format!("{}: {err}", path.display()),
            })?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|err| ConfigError {
                setting: "ca_file",
                problem: format!("{}: {err}", path.display()),
            })? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().map_err(|err| ConfigError {
            setting: "ca_file",
            problem: err.to_string(),
        })?;
        let issuers = checked
            .issuers
            .iter()
            .map(|id| {
                Issuer::new(
                    id.clone(),
                    http.clone(),
                    checked.jwks_cache,
                    checked.jwks_refresh_min,
                )
            })
            .collect();
        let introspection = checked.introspection.clone().map(|i| (i, http.clone()));
        let introspection_calls = checked.introspection.as_ref().map(IntrospectionBudget::new);
        let refused = NegativeCache::new(
            checked
                .introspection
                .as_ref()
                .map_or(0, |i| i.negative_cache_entries),
        );
        let metadata = ResourceMetadata::new(&config, &checked.resource);
        Ok(Self {
            config,
            checked,
            issuers,
            introspection,
            known: DashMap::new(),
            refused,
            introspection_calls,
            metadata,
        })
    }

    /// The settings.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The protected resource metadata (RFC 9728) and where it is served.
    pub fn metadata(&self) -> &ResourceMetadata {
        &self.metadata
    }

    /// Fetches every issuer's keys ahead of the first request; failures
    /// are logged (requests then try again).
    pub async fn prefetch(&self) {
        for issuer in &self.issuers {
            if let Err(err) = issuer.keys_for(Some(""), Algorithm::RS256).await
                && !matches!(err, AuthError::Invalid(_))
            {
                tracing::warn!(issuer = %issuer.id, error = err.for_log(), "The issuer's keys are not available yet.");
            }
        }
    }

    /// Validates the `Authorization` header of a request (its value, `None`
    /// when absent) from `client` (the client's address, when known: the
    /// introspection calls its tokens cause are counted against it) and
    /// checks the scopes every request needs.
    ///
    /// # Errors
    /// Why the request is not authorized.
    pub async fn authenticate(
        &self,
        header: Option<&[u8]>,
        client: Option<IpAddr>,
    ) -> Result<Arc<Principal>, AuthError> {
        let outcome = self.principal(header, client).await.and_then(|principal| {
            self.check_scopes(&principal, &self.config.required_scopes)?;
            Ok(principal)
        });
        if let Err(err) = &outcome {
            mcp_cluster_telemetry::metrics::metrics()
                .auth_failures
                .with_label_values(&[err.label()])
                .inc();
        }
        outcome
    }

    /// Checks that `principal` holds every scope in `needed`.
    ///
    /// # Errors
    /// [`AuthError::InsufficientScope`] naming every scope needed (the
    /// client asks for all of them when it steps up).
    pub fn check_scopes(&self, principal: &Principal, needed: &[String]) -> Result<(), AuthError> {
        if needed.iter().all(|s| principal.has_scope(s)) {
            Ok(())
        } else {
            Err(AuthError::InsufficientScope(needed.to_vec()))
        }
    }

    /// The scopes a call of `tool` needs: the required scopes, the tool's
    /// own (`declared`) and the configured ones.
    pub fn tool_scopes(&self, tool: &str, declared: &[String]) -> Vec<String> {
        let mut scopes = self.config.required_scopes.clone();
        let configured = self.config.tool_scopes.get(tool).into_iter().flatten();
        for s in declared.iter().chain(configured) {
            if !scopes.contains(s) {
                scopes.push(s.clone());
            }
        }
        scopes
    }

    /// Counts a refused tool call (the pipeline checks tool scopes).
    pub fn count_refusal(err: &AuthError) {
        mcp_cluster_telemetry::metrics::metrics()
            .auth_failures
            .with_label_values(&[err.label()])
            .inc();
    }

    async fn principal(
        &self,
        header: Option<&[u8]>,
        client: Option<IpAddr>,
    ) -> Result<Arc<Principal>, AuthError> {
        let token = bearer(header)?;
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = now();
        if let Some(known) = self.known.get(&digest).map(|k| k.clone()) {
            if now <= known.until {
                if let Some(exp) = known.expires
                    && now > exp + self.checked.leeway
                {
                    return Err(AuthError::Invalid(Rejection::Expired));
                }
                return Ok(known.principal);
            }
            self.known.remove(&digest);
        }
        let (principal, until, expires) = if token.split('.').count() == 3 {
            let (principal, exp) = self.verify_jwt(token).await?;
            (principal, exp + self.checked.leeway, Some(exp))
        } else if let Some((introspection, http)) = &self.introspection {
            let budget = self.introspection_calls.as_ref();
            if let Some(rejection) = self.refused.get(&digest, now) {
                // The same refused token again: no call, and its address
                // stays off the reserve.
                if let Some(budget) = budget {
                    budget.refused(client);
                }
                return Err(AuthError::Invalid(rejection));
            }
            if let Some(budget) = budget {
                budget.admit(client).await.map_err(|throttled| {
                    tracing::debug!(
                        ?client,
                        retry_after = ?throttled.retry_after,
                        "Introspection call refused: bound reached."
                    );
                    AuthError::Throttled {
                        retry_after: throttled.retry_after,
                    }
                })?;
            }
            let (outcome, until, expires) =
                self.introspect(token, introspection, http, now).await?;
            match outcome {
                Ok(principal) => (principal, until, expires),
                Err(rejection) => {
                    self.refused.insert(digest, rejection, until, now);
                    if let Some(budget) = budget {
                        budget.refused(client);
                    }
                    return Err(AuthError::Invalid(rejection));
                }
            }
        } else {
            return Err(AuthError::Invalid(Rejection::Malformed));
        };
        self.remember(
            digest,
            Known {
                principal: Arc::clone(&principal),
                until,
                expires,
            },
            now,
        );
        Ok(principal)
    }

    /// Remembers an answer, within the bound: when full, answers past their
    /// time go first; if none has, this one is not remembered.
    fn remember(&self, digest: [u8; 32], known: Known, now: u64) {
        let max = self.config.token_cache_entries;
        if max == 0 {
            return;
        }
        if self.known.len() >= max {
            self.known.retain(|_, k| k.until >= now);
            if self.known.len() >= max {
                return;
            }
        }
        self.known.insert(digest, known);
    }

    /// Verifies a JWT access token; returns its principal and `exp`.
    async fn verify_jwt(&self, token: &str) -> Result<(Arc<Principal>, u64), AuthError> {
        let invalid = AuthError::Invalid;
        if segment_json(token, 0).is_none() {
            return Err(invalid(Rejection::Malformed));
        }
        // The header names the algorithm; `none`, symmetric and unknown
        // algorithms do not parse into an accepted one.
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| invalid(Rejection::Algorithm))?;
        if !self.checked.algorithms.contains(&header.alg) {
            return Err(invalid(Rejection::Algorithm));
        }
        // The issuer picks the keys; it is checked again, signed, below.
        let unverified = unverified_claims(token).ok_or(invalid(Rejection::Malformed))?;
        let iss = unverified.iss.ok_or(invalid(Rejection::Claims))?;
        let issuer = self
            .issuers
            .iter()
            .find(|i| i.id == iss)
            .ok_or(invalid(Rejection::Issuer))?;
        let keys = issuer.keys_for(header.kid.as_deref(), header.alg).await?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.checked.leeway;
        validation.validate_nbf = true;
        validation.set_issuer(&[&issuer.id]);
        validation.set_audience(&self.checked.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut last = invalid(Rejection::Signature);
        for key in &keys {
            match jsonwebtoken::decode::<Claims>(token, key, &validation) {
                Ok(data) => return self.principal_of(data.claims, &issuer.id),
                Err(err) => {
                    last = invalid(rejection_of(err.kind()));
                    if !matches!(
                        err.kind(),
                        jsonwebtoken::errors::ErrorKind::InvalidSignature
                    ) {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    fn principal_of(
        &self,
        claims: Claims,
        issuer: &str,
    ) -> Result<(Arc<Principal>, u64), AuthError> {
        let invalid = AuthError::Invalid;
        let subject = claims.sub.ok_or(invalid(Rejection::Claims))?;
        let exp = claims.exp.ok_or(invalid(Rejection::Claims))?;
        let mut scopes: Vec<String> = claims
            .scope
            .map(|s| s.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        if let Some(scp) = claims.scp {
            scopes.extend(scp.into_scopes());
        }
        Ok((
            Arc::new(Principal {
                issuer: issuer.to_owned(),
                subject,
                client_id: claims.client_id.or(claims.azp),
                scopes,
            }),
            exp,
        ))
    }

    /// Asks the introspection endpoint about an opaque token. Returns the
    /// outcome, until when it may be reused, and the token's `exp`.
    async fn introspect(
        &self,
        token: &str,
        config: &CheckedIntrospection,
        http: &reqwest::Client,
        now: u64,
    ) -> Result<(Result<Arc<Principal>, Rejection>, u64, Option<u64>), AuthError> {
        let endpoint = match &config.endpoint {
            Some(url) => url.to_string(),
            None => {
                let issuer = self
                    .issuers
                    .first()
                    .ok_or_else(|| AuthError::Unavailable("no introspection endpoint".into()))?;
                issuer
                    .metadata()
                    .await
                    .inspect_err(|err| {
                        tracing::warn!(
                            error = err.for_log(),
                            "The issuer's metadata could not be fetched for introspection."
                        );
                    })?
                    .introspection_endpoint
                    .ok_or_else(|| {
                        AuthError::Unavailable(format!(
                            "the metadata of {} has no introspection_endpoint",
                            issuer.id
                        ))
                    })?
            }
        };
        let sent = http
            .post(&endpoint)
            .basic_auth(&config.client_id, Some(config.client_secret.expose()))
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .send()
            .await;
        let outcome = match sent {
            Ok(response) => read_json::<Claims>(response, &endpoint).await,
            Err(err) => Err(AuthError::Unavailable(format!("{endpoint}: {err}"))),
        };
        if let Err(err) = &outcome {
            // At most as often as the bounds on introspection calls allow.
            tracing::warn!(error = err.for_log(), "Introspection failed.");
        }
        mcp_cluster_telemetry::metrics::metrics()
            .auth_introspections
            .with_label_values(&[if outcome.is_ok() { "ok" } else { "failed" }])
            .inc();
        let claims = outcome?;
        let negative = now + config.negative_cache.as_secs();
        if claims.active != Some(true) {
            return Ok((Err(Rejection::Inactive), negative, None));
        }
        let refused = |r| Ok((Err(r), negative, None));
        if let Some(exp) = claims.exp
            && now > exp + self.checked.leeway
        {
            return refused(Rejection::Expired);
        }
        if let Some(nbf) = claims.nbf
            && nbf > now + self.checked.leeway
        {
            return refused(Rejection::NotYetValid);
        }
        if let Some(aud) = &claims.aud
            && !aud.contains_any(&self.checked.audiences)
        {
            return refused(Rejection::Audience);
        }
        // The issuer, when named, must be trusted; an answer without one
        // speaks for the introspection endpoint's own server.
        let issuer = match (&claims.iss, self.issuers.first()) {
            (Some(iss), _) if self.issuers.iter().any(|i| i.id == *iss) => iss.clone(),
            (Some(_), _) => return refused(Rejection::Issuer),
            (None, Some(first)) => first.id.clone(),
            (None, None) => endpoint.clone(),
        };
        let exp = claims.exp;
        let until = exp.map_or(now + config.cache.as_secs(), |e| {
            e.min(now + config.cache.as_secs())
        });
        match self.principal_of(
            Claims {
                exp: Some(exp.unwrap_or(until)),
                ..claims
            },
            &issuer,
        ) {
            Ok((principal, _)) => Ok((Ok(principal), until, exp)),
            Err(AuthError::Invalid(r)) => refused(r),
            Err(other) => Err(other),
        }
    }
}

/// The claims of a JWT before its signature is checked: only to pick the
/// issuer whose keys check it.
fn unverified_claims(token: &str) -> Option<Claims> {
    serde_json::from_value(segment_json(token, 1)?).ok()
}

/// Segment `n` of a JWT (0: header, 1: payload) as a JSON object.
fn segment_json(token: &str, n: usize) -> Option<serde_json::Value> {
    let segment = token.split('.').nth(n)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(segment.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .filter(serde_json::Value::is_object)
}

fn rejection_of(kind: &jsonwebtoken::errors::ErrorKind) -> Rejection {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::ExpiredSignature => Rejection::Expired,
        K::ImmatureSignature => Rejection::NotYetValid,
        K::InvalidIssuer => Rejection::Issuer,
        K::InvalidAudience => Rejection::Audience,
        K::InvalidSignature => Rejection::Signature,
        K::InvalidAlgorithm | K::InvalidAlgorithmName | K::MissingAlgorithm => Rejection::Algorithm,
        K::MissingRequiredClaim(_) | K::InvalidClaimFormat(_) | K::InvalidSubject => {
            Rejection::Claims
        }
        _ => Rejection::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let c: Claims = serde_json::from_str(r#"{"scp": ["a", "b"]}"#).unwrap();
        assert_eq!(c.scp.unwrap().into_scopes(), ["a", "b"]);
        let c: Claims = serde_json::from_str(r#"{"scp": "a b"}"#).unwrap();
        assert_eq!(c.scp.unwrap().into_scopes(), ["a", "b"]);
    }

    #[test]
    fn unverified_claims_read_the_payload() {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"iss":"https://idp.example","sub":"a"}"#);
        let claims = unverified_claims(&format!("x.{payload}.y")).unwrap();
        assert_eq!(claims.iss.as_deref(), Some("https://idp.example"));
        assert!(unverified_claims("x.%%%.y").is_none());
    }
}
