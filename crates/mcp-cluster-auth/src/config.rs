//! [`AuthConfig`]: the resource server's settings, validated once at start.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[cfg(feature = "verify")]
use jsonwebtoken::Algorithm;
use mcp_cluster_telemetry::Secret;
use serde::{Deserialize, Serialize};
use url::Url;

/// The signature algorithms by name, for the checks of a build without
/// token validation (feature `verify`): the same names as jsonwebtoken's.
#[cfg(not(feature = "verify"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::upper_case_acronyms)]
pub(crate) enum Algorithm {
    HS256,
    HS384,
    HS512,
    RS256,
    RS384,
    RS512,
    PS256,
    PS384,
    PS512,
    ES256,
    ES384,
    EdDSA,
}

#[cfg(not(feature = "verify"))]
impl std::str::FromStr for Algorithm {
    type Err = ();

    fn from_str(name: &str) -> Result<Self, ()> {
        const ALL: [(&str, Algorithm); 12] = [
            ("HS256", Algorithm::HS256),
            ("HS384", Algorithm::HS384),
            ("HS512", Algorithm::HS512),
            ("RS256", Algorithm::RS256),
            ("RS384", Algorithm::RS384),
            ("RS512", Algorithm::RS512),
            ("PS256", Algorithm::PS256),
            ("PS384", Algorithm::PS384),
            ("PS512", Algorithm::PS512),
            ("ES256", Algorithm::ES256),
            ("ES384", Algorithm::ES384),
            ("EdDSA", Algorithm::EdDSA),
        ];
        ALL.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, alg)| *alg)
            .ok_or(())
    }
}

/// Algorithms a token may be signed with: asymmetric only. An HMAC
/// algorithm (`HS*`) would let anyone holding the issuer's public key sign
/// tokens, and `none` signs nothing.
const ASYMMETRIC: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// OAuth 2.1 resource server settings (MCP authorization, 2025-06-18 and
/// later). Present, every HTTP request needs a valid bearer token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// This server's canonical resource URI (RFC 8707, RFC 9728
    /// `resource`): the public URL clients use, e.g.
    /// `https://mcp.example.com/mcp`. Tokens must name it (or one of
    /// `audiences`) in `aud`. Required.
    pub resource: String,
    /// Other `aud` values accepted, for identity providers that name an API
    /// otherwise (Auth0: the API identifier; Entra ID v2 tokens: the
    /// application (client) id). Default none.
    pub audiences: Vec<String>,
    /// Issuers whose tokens are accepted (the authorization servers, as in
    /// their metadata's `issuer`). Their keys are found through RFC 8414 or
    /// OpenID Connect discovery. HTTPS, or HTTP on a loopback host (tests).
    pub issuers: Vec<String>,
    /// Scopes every request needs. Default none.
    pub required_scopes: Vec<String>,
    /// Scopes needed to call a tool, by tool name, on top of the tool's own
    /// (a tool may declare scopes in code). Default none.
    pub tool_scopes: BTreeMap<String, Vec<String>>,
    /// Scopes named in the protected resource metadata. Default: the
    /// required scopes and every tool scope.
    pub scopes_supported: Vec<String>,
    /// Accepted signature algorithms, asymmetric only. Default `RS256`,
    /// `ES256` (what identity providers sign with by default).
    pub algorithms: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds. Default 30.
    pub leeway_secs: u64,
    /// Seconds an issuer's keys are used before they are fetched again.
    /// Default 600.
    pub jwks_cache_secs: u64,
    /// Seconds between two fetches of an issuer's keys: a token naming an
    /// unknown key fetches them again (key rotation) at most this often, so
    /// that tokens with made-up key ids cannot make the node hammer the
    /// issuer. Default 10.
    pub jwks_refresh_min_secs: u64,
    /// Timeout of each call to an authorization server, in seconds.
    /// Default 5.
    pub http_timeout_secs: u64,
    /// A PEM file of CA certificates trusted for the authorization servers
    /// besides the system's (a private PKI). Default none.
    pub ca_file: Option<PathBuf>,
    /// Validated tokens remembered (by SHA-256 of the token), so that a
    /// token's signature is checked once, not per request; each entry
    /// lasts until its token expires. Default 10,000.
    pub token_cache_entries: usize,
    /// RFC 7662 introspection of tokens that are not JWTs. Default off.
    pub introspection: Option<IntrospectionConfig>,
    /// `resource_name` of the protected resource metadata. Default none.
    pub resource_name: Option<String>,
    /// `resource_documentation` of the metadata: a URL. Default none.
    pub resource_documentation: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            resource: String::new(),
            audiences: Vec::new(),
            issuers: Vec::new(),
            required_scopes: Vec::new(),
            tool_scopes: BTreeMap::new(),
            scopes_supported: Vec::new(),
            algorithms: vec!["RS256".into(), "ES256".into()],
            leeway_secs: 30,
            jwks_cache_secs: 600,
            jwks_refresh_min_secs: 10,
            http_timeout_secs: 5,
            ca_file: None,
            token_cache_entries: 10_000,
            introspection: None,
            resource_name: None,
            resource_documentation: None,
        }
    }
}

/// RFC 7662 token introspection: opaque (non-JWT) tokens are sent to the
/// authorization server, which says whether they are active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntrospectionConfig {
    /// The introspection endpoint. Default: the first issuer's
    /// `introspection_endpoint` from its metadata.
    pub endpoint: Option<String>,
    /// This resource server's client id at the authorization server (HTTP
    /// Basic authentication of the introspection call).
    pub client_id: String,
    /// Its client secret (printed and serialized as `"<redacted>"`).
    /// Prefer `client_secret_file`.
    pub client_secret: Option<Secret>,
    /// A file holding the client secret (a mounted Secret).
    pub client_secret_file: Option<PathBuf>,
    /// Longest time an active answer is reused, in seconds (never past the
    /// token's `exp`). Default 300.
    pub cache_secs: u64,
    /// Seconds an inactive answer is reused, so that the same made-up
    /// token sent again does not become another introspection call.
    /// Default 10.
    pub negative_cache_secs: u64,
    /// Introspection calls one client address (IPv6: its /64) may cause
    /// per `calls_per_address_window_secs`: tokens answered from the cache
    /// cost nothing, each token the node has to ask about costs one. Past
    /// it the request gets 503 with `Retry-After`, never an accepted
    /// token; other addresses are not affected. 0: no bound per address.
    /// Default 60 (a burst of 60, then one a second): many people behind
    /// one NAT, each with a new token now and then, while made-up tokens
    /// from one address reach the authorization server at one a second,
    /// not at the client's rate.
    pub calls_per_address: u32,
    /// The window of `calls_per_address`, in seconds. Default 60.
    pub calls_per_address_window_secs: u64,
    /// Introspection calls the node makes per second in all, whatever the
    /// addresses (a burst of this many, then as many a second). Past it
    /// the request gets 503 with `Retry-After`. 0: no bound. Default 50:
    /// ten thousand users whose tokens are cached for `cache_secs` (300)
    /// need about 33 a second.
    pub calls_per_second: u32,
    /// Of `calls_per_second`, the calls a second kept for addresses in good
    /// standing: the others (an address that presented a token found
    /// inactive, or refused, within `calls_per_address_window_secs`, or
    /// that used its `reserved_calls_per_address`) can fill the node's
    /// bound only up to `calls_per_second` less this, so that addresses
    /// flooding made-up tokens, each within its own share, never spend
    /// what a client with a new token needs. Must be below
    /// `calls_per_second`; 0: no reserve (first come, first served).
    /// Default none: a fifth of `calls_per_second` (10 of 50), enough for
    /// the new tokens of honest clients while most of the bound stays
    /// open to all.
    pub reserved_calls_per_second: Option<u32>,
    /// Calls of the reserve one address may take per
    /// `calls_per_address_window_secs`, counted only when the rest of the
    /// bound is taken: one address (or a few) cannot spend the reserve
    /// either. 0: no share per address (the standing alone decides).
    /// Default 5 (a burst of 5, then one every 12 s): a NAT's new tokens
    /// while the node is flooded, half of the default reserve's burst.
    pub reserved_calls_per_address: u32,
    /// Inactive (or otherwise refused) introspection answers remembered,
    /// each for `negative_cache_secs`, by SHA-256 of the token (about
    /// 100 bytes each: never the token), apart from the active ones so
    /// that made-up tokens cannot push them out. When full of live
    /// answers, a new one is not remembered. 0: none remembered. Default
    /// 10,000 (about 1 MB): more than `calls_per_second` (50) ×
    /// `negative_cache_secs` (10) answers can be live at once.
    pub negative_cache_entries: usize,
}

impl Default for IntrospectionConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            client_id: String::new(),
            client_secret: None,
            client_secret_file: None,
            cache_secs: 300,
            negative_cache_secs: 10,
            calls_per_address: 60,
            calls_per_address_window_secs: 60,
            calls_per_second: 50,
            reserved_calls_per_second: None,
            reserved_calls_per_address: 5,
            negative_cache_entries: 10_000,
        }
    }
}

/// A setting that cannot work, with the setting's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("auth.{setting}: {problem}")]
pub struct ConfigError {
    /// The setting.
    pub setting: &'static str,
    /// What is wrong.
    pub problem: String,
}

fn invalid(setting: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        setting,
        problem: problem.into(),
    }
}

/// The settings, checked and parsed (read by the authenticator only).
#[cfg_attr(not(feature = "verify"), allow(dead_code))]
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    pub(crate) resource: Url,
    pub(crate) audiences: Vec<String>,
    pub(crate) issuers: Vec<String>,
    pub(crate) algorithms: Vec<Algorithm>,
    pub(crate) leeway: u64,
    pub(crate) jwks_cache: Duration,
    pub(crate) jwks_refresh_min: Duration,
    pub(crate) http_timeout: Duration,
    pub(crate) introspection: Option<CheckedIntrospection>,
}

#[cfg_attr(not(feature = "verify"), allow(dead_code))]
#[derive(Debug, Clone)]
pub(crate) struct CheckedIntrospection {
    pub(crate) endpoint: Option<Url>,
    pub(crate) client_id: String,
    pub(crate) client_secret: Secret,
    pub(crate) cache: Duration,
    pub(crate) negative_cache: Duration,
    /// Calls per client address, `None` when unbounded.
    pub(crate) per_address: Option<mcp_cluster_store::Rate>,
    /// Calls in all, `None` when unbounded.
    pub(crate) in_all: Option<mcp_cluster_store::Rate>,
    /// Of `in_all`'s limit, the calls a second kept for addresses in good
    /// standing (0: none).
    pub(crate) reserved: u32,
    /// An address's share of the reserve, `None` when unbounded.
    pub(crate) reserved_per_address: Option<mcp_cluster_store::Rate>,
    /// How long a refused token keeps its address off the reserve.
    pub(crate) standing_window: Duration,
    /// Refused answers remembered at most.
    pub(crate) negative_cache_entries: usize,
}

impl AuthConfig {
    /// Checks the settings.
    ///
    /// # Errors
    /// The first setting that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check().map(|_| ())
    }

    pub(crate) fn check(&self) -> Result<Checked, ConfigError> {
        if self.resource.is_empty() {
            return Err(invalid(
                "resource",
                "required: this server's public URL, e.g. https://mcp.example.com/mcp",
            ));
        }
        let resource = url("resource", &self.resource)?;
        if resource.query().is_some() {
            return Err(invalid("resource", "must not have a query"));
        }
        if self.issuers.is_empty() && self.introspection.is_none() {
            return Err(invalid(
                "issuers",
                "name at least one authorization server (or configure introspection)",
            ));
        }
        for issuer in &self.issuers {
            let parsed = url("issuers", issuer)?;
            if parsed.query().is_some() {
                return Err(invalid(
                    "issuers",
                    format!(
                        "{}: must not have a query",
                        mcp_cluster_telemetry::redacted_url(issuer)
                    ),
                ));
            }
        }
        let algorithms = self
            .algorithms
            .iter()
            .map(|name| {
                let alg: Algorithm = name
                    .parse()
                    .map_err(|_| invalid("algorithms", format!("unknown algorithm {name}")))?;
                if ASYMMETRIC.contains(&alg) {
                    Ok(alg)
                } else {
                    Err(invalid(
                        "algorithms",
                        format!(
                            "{name} is symmetric: only asymmetric algorithms are accepted \
                             (RS*, PS*, ES256, ES384, EdDSA)"
                        ),
                    ))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if algorithms.is_empty() && !self.issuers.is_empty() {
            return Err(invalid("algorithms", "name at least one"));
        }
        if let Some(path) = &self.ca_file
            && let Err(err) = std::fs::read(path)
        {
            return Err(invalid("ca_file", format!("{}: {err}", path.display())));
        }
        let introspection = self
            .introspection
            .as_ref()
            .map(|i| i.check(self.issuers.is_empty()))
            .transpose()?;
        let mut audiences = vec![self.resource.clone()];
        audiences.extend(self.audiences.iter().cloned());
        Ok(Checked {
            resource,
            audiences,
            issuers: self.issuers.clone(),
            algorithms,
            leeway: self.leeway_secs,
            jwks_cache: Duration::from_secs(self.jwks_cache_secs),
            jwks_refresh_min: Duration::from_secs(self.jwks_refresh_min_secs),
            http_timeout: Duration::from_secs(self.http_timeout_secs.max(1)),
            introspection,
        })
    }

    /// The scopes the metadata names: `scopes_supported`, else the required
    /// and tool scopes.
    pub fn advertised_scopes(&self) -> Vec<String> {
        if !self.scopes_supported.is_empty() {
            return self.scopes_supported.clone();
        }
        let mut scopes: Vec<String> = self.required_scopes.clone();
        for s in self.tool_scopes.values().flatten() {
            if !scopes.contains(s) {
                scopes.push(s.clone());
            }
        }
        scopes
    }
}

impl IntrospectionConfig {
    fn check(&self, no_issuers: bool) -> Result<CheckedIntrospection, ConfigError> {
        let endpoint = self
            .endpoint
            .as_deref()
            .map(|e| url("introspection.endpoint", e))
            .transpose()?;
        if endpoint.is_none() && no_issuers {
            return Err(invalid(
                "introspection.endpoint",
                "required when no issuer is configured to discover it from",
            ));
        }
        if self.client_id.is_empty() {
            return Err(invalid("introspection.client_id", "required"));
        }
        if self.calls_per_address_window_secs == 0 {
            return Err(invalid(
                "introspection.calls_per_address_window_secs",
                "must be positive",
            ));
        }
        let reserved = match self.reserved_calls_per_second {
            _ if self.calls_per_second == 0 => 0,
            None if self.calls_per_second >= 2 => (self.calls_per_second / 5).max(1),
            None => 0,
            Some(reserved) if reserved >= self.calls_per_second => {
                return Err(invalid(
                    "introspection.reserved_calls_per_second",
                    format!(
                        "{reserved} must be below calls_per_second ({}): the rest is open to \
                         every address",
                        self.calls_per_second
                    ),
                ));
            }
            Some(reserved) => reserved,
        };
        let client_secret = match (&self.client_secret, &self.client_secret_file) {
            (Some(secret), None) => secret.clone(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map(|s| Secret::new(s.trim_end()))
                .map_err(|err| {
                    invalid(
                        "introspection.client_secret_file",
                        format!("{}: {err}", path.display()),
                    )
                })?,
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "introspection.client_secret",
                    "give client_secret or client_secret_file, not both",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "introspection.client_secret",
                    "required (or client_secret_file)",
                ));
            }
        };
        Ok(CheckedIntrospection {
            endpoint,
            client_id: self.client_id.clone(),
            client_secret,
            cache: Duration::from_secs(self.cache_secs),
            negative_cache: Duration::from_secs(self.negative_cache_secs),
            per_address: (self.calls_per_address > 0).then(|| mcp_cluster_store::Rate {
                limit: self.calls_per_address,
                window: Duration::from_secs(self.calls_per_address_window_secs),
            }),
            in_all: (self.calls_per_second > 0).then(|| mcp_cluster_store::Rate {
                limit: self.calls_per_second,
                window: Duration::from_secs(1),
            }),
            reserved,
            reserved_per_address: (self.reserved_calls_per_address > 0).then(|| {
                mcp_cluster_store::Rate {
                    limit: self.reserved_calls_per_address,
                    window: Duration::from_secs(self.calls_per_address_window_secs),
                }
            }),
            standing_window: Duration::from_secs(self.calls_per_address_window_secs),
            negative_cache_entries: self.negative_cache_entries,
        })
    }
}

/// An absolute HTTPS URL without fragment (HTTP on loopback hosts only:
/// test issuers and local development).
fn url(setting: &'static str, value: &str) -> Result<Url, ConfigError> {
    // Shown without the password or query values it may hold; one that
    // does not parse, as its scheme and host at most.
    let parsed = Url::parse(value).map_err(|err| {
        let shown = mcp_cluster_telemetry::url_scheme_and_host(value);
        invalid(setting, format!("{shown}: {err}"))
    })?;
    let value = mcp_cluster_telemetry::redacted_url(value);
    if parsed.fragment().is_some() {
        return Err(invalid(
            setting,
            format!("{value}: must not have a fragment"),
        ));
    }
    match parsed.scheme() {
        "https" => Ok(parsed),
        "http" if is_loopback(&parsed) => Ok(parsed),
        "http" => Err(invalid(
            setting,
            format!("{value}: must be https (http only on a loopback host)"),
        )),
        other => Err(invalid(
            setting,
            format!("{value}: scheme {other} is not https"),
        )),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AuthConfig {
        AuthConfig {
            resource: "https://mcp.example.com/mcp".into(),
            issuers: vec!["https://idp.example.com/realms/a".into()],
            ..AuthConfig::default()
        }
    }

    #[test]
    fn a_complete_config_passes() {
        config().validate().unwrap();
    }

    #[test]
    fn symmetric_and_unknown_algorithms_are_refused() {
        for alg in ["HS256", "none", "XS1"] {
            let c = AuthConfig {
                algorithms: vec!["RS256".into(), alg.into()],
                ..config()
            };
            let err = c.validate().unwrap_err();
            assert_eq!(err.setting, "algorithms", "{alg}");
        }
    }

    #[test]
    fn plain_http_only_on_loopback() {
        let c = AuthConfig {
            issuers: vec!["http://idp.example.com".into()],
            ..config()
        };
        assert_eq!(c.validate().unwrap_err().setting, "issuers");
        let c = AuthConfig {
            resource: "http://127.0.0.1:8080/mcp".into(),
            issuers: vec!["http://localhost:9000".into()],
            ..config()
        };
        c.validate().unwrap();
    }

    #[test]
    fn resource_and_issuers_are_required() {
        let c = AuthConfig {
            resource: String::new(),
            ..config()
        };
        assert_eq!(c.validate().unwrap_err().setting, "resource");
        let c = AuthConfig {
            issuers: vec![],
            ..config()
        };
        assert_eq!(c.validate().unwrap_err().setting, "issuers");
        let c = AuthConfig {
            resource: "https://mcp.example.com/mcp#frag".into(),
            ..config()
        };
        assert_eq!(c.validate().unwrap_err().setting, "resource");
    }

    #[test]
    fn introspection_needs_credentials() {
        let c = AuthConfig {
            introspection: Some(IntrospectionConfig {
                client_id: "rs".into(),
                ..IntrospectionConfig::default()
            }),
            ..config()
        };
        assert_eq!(
            c.validate().unwrap_err().setting,
            "introspection.client_secret"
        );
    }

    #[test]
    fn the_reserve_is_a_fifth_of_the_node_bound_unless_set_below_it() {
        let checked = |calls_per_second, reserved| {
            IntrospectionConfig {
                client_id: "rs".into(),
                client_secret: Some("s".into()),
                calls_per_second,
                reserved_calls_per_second: reserved,
                ..IntrospectionConfig::default()
            }
            .check(false)
        };
        let reserve = |calls, reserved| checked(calls, reserved).unwrap().reserved;
        assert_eq!(reserve(50, None), 10);
        assert_eq!(reserve(5, None), 1);
        assert_eq!(reserve(1, None), 0, "nothing left to share");
        assert_eq!(reserve(0, None), 0, "no bound, no reserve");
        assert_eq!(reserve(0, Some(10)), 0);
        assert_eq!(reserve(50, Some(0)), 0);
        assert_eq!(reserve(50, Some(49)), 49);
        let err = checked(50, Some(50)).unwrap_err();
        assert_eq!(err.setting, "introspection.reserved_calls_per_second");
        let share = checked(50, None).unwrap().reserved_per_address.unwrap();
        assert_eq!((share.limit, share.window.as_secs()), (5, 60));
    }

    #[test]
    fn the_client_secret_is_never_printed() {
        let i = IntrospectionConfig {
            client_id: "rs".into(),
            client_secret: Some("s3cr3t".into()),
            ..IntrospectionConfig::default()
        };
        let printed = format!("{i:?}");
        assert!(!printed.contains("s3cr3t"), "{printed}");
        assert!(printed.contains("<redacted>"));
    }

    #[test]
    fn advertised_scopes_default_to_required_and_tool_scopes() {
        let c = AuthConfig {
            required_scopes: vec!["mcp".into()],
            tool_scopes: BTreeMap::from([
                ("a".to_owned(), vec!["mcp".to_owned(), "admin".to_owned()]),
                ("b".to_owned(), vec!["write".to_owned()]),
            ]),
            ..config()
        };
        assert_eq!(c.advertised_scopes(), ["mcp", "admin", "write"]);
    }
}
