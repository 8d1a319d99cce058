//! [`AuthError`]: why a request was not authorized.

/// Why a token was refused. The message goes to the client (in
/// `error_description`); it names the problem, never a key or the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// Not a JWT, and no introspection to ask about it.
    Malformed,
    /// `alg` is `none`, symmetric, or not in the accepted list.
    Algorithm,
    /// `exp` has passed.
    Expired,
    /// `nbf` is in the future.
    NotYetValid,
    /// `iss` is not a configured issuer.
    Issuer,
    /// `aud` names another resource (RFC 8707).
    Audience,
    /// The key id is not among the issuer's keys.
    UnknownKey,
    /// The signature does not verify.
    Signature,
    /// A required claim is missing or malformed.
    Claims,
    /// Introspection says the token is not active.
    Inactive,
}

impl Rejection {
    /// The label of `mcp_auth_failures_total{reason}`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Algorithm => "algorithm",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::Issuer => "issuer",
            Self::Audience => "audience",
            Self::UnknownKey => "unknown_key",
            Self::Signature => "signature",
            Self::Claims => "claims",
            Self::Inactive => "inactive",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Self::Malformed => "the access token is malformed",
            Self::Algorithm => "the access token's signature algorithm is not accepted",
            Self::Expired => "the access token has expired",
            Self::NotYetValid => "the access token is not valid yet",
            Self::Issuer => "the access token's issuer is not trusted",
            Self::Audience => "the access token was issued for another resource",
            Self::UnknownKey => "the access token is signed with an unknown key",
            Self::Signature => "the access token's signature is invalid",
            Self::Claims => "the access token lacks a required claim",
            Self::Inactive => "the access token is not active",
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

/// Why a request was not authorized.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization` header (HTTP 401, no error code: RFC 6750 3.1).
    #[error("an access token is required")]
    Missing,
    /// The header is not `Bearer <token>` (HTTP 401 `invalid_request`).
    #[error("the Authorization header must be: Bearer <access token>")]
    MalformedHeader,
    /// The token is not valid (HTTP 401 `invalid_token`).
    #[error("{0}")]
    Invalid(Rejection),
    /// The token is valid but lacks scopes (HTTP 403 `insufficient_scope`).
    #[error("the access token lacks the scope {}", .0.join(" "))]
    InsufficientScope(Vec<String>),
    /// The authorization server (its metadata, keys or introspection) could
    /// not be reached, so the token could not be checked (HTTP 503). Never
    /// an accepted token. The text says why, for the log: the client is
    /// told only that the server is unavailable (it needs neither the
    /// identity provider's URLs nor its connection errors).
    #[error("authorization server unavailable")]
    Unavailable(String),
    /// The token would have to be introspected, and this client address,
    /// or the node in all, already made the configured number of
    /// introspection calls (HTTP 503 with `Retry-After`). Never an accepted
    /// token.
    #[error("too many access tokens to check with the authorization server; retry later")]
    Throttled {
        /// How long until a call fits again.
        retry_after: std::time::Duration,
    },
}

impl AuthError {
    /// The label of `mcp_auth_failures_total{reason}`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::MalformedHeader => "malformed_header",
            Self::Invalid(r) => r.label(),
            Self::InsufficientScope(_) => "insufficient_scope",
            Self::Unavailable(_) => "unavailable",
            Self::Throttled { .. } => "throttled",
        }
    }

    /// What the log is told beside the client's message: why the
    /// authorization server is unavailable.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Self::Unavailable(detail) => Some(detail),
            _ => None,
        }
    }

    /// The error as the log tells it: the client's message, or for an
    /// unavailable server what failed (URL and cause).
    pub fn for_log(&self) -> String {
        match self.detail() {
            Some(detail) => format!("{self}: {detail}"),
            None => self.to_string(),
        }
    }

    /// Whole seconds a client should wait before trying again (at least
    /// 1), for the answers that say so: the authorization server
    /// unavailable or throttled.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            Self::Unavailable(_) => Some(1),
            Self::Throttled { retry_after } => {
                Some(retry_after.as_secs_f64().ceil().max(1.0) as u64)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_is_listed() {
        let all = [
            AuthError::Missing,
            AuthError::MalformedHeader,
            AuthError::InsufficientScope(vec![]),
            AuthError::Unavailable(String::new()),
            AuthError::Throttled {
                retry_after: std::time::Duration::ZERO,
            },
            AuthError::Invalid(Rejection::Malformed),
            AuthError::Invalid(Rejection::Algorithm),
            AuthError::Invalid(Rejection::Expired),
            AuthError::Invalid(Rejection::NotYetValid),
            AuthError::Invalid(Rejection::Issuer),
            AuthError::Invalid(Rejection::Audience),
            AuthError::Invalid(Rejection::UnknownKey),
            AuthError::Invalid(Rejection::Signature),
            AuthError::Invalid(Rejection::Claims),
            AuthError::Invalid(Rejection::Inactive),
        ];
        let reasons = mcp_cluster_telemetry::metrics::AUTH_FAILURE_REASONS;
        for e in &all {
            assert!(reasons.contains(&e.label()), "{}", e.label());
        }
        assert_eq!(all.len(), reasons.len());
    }

    #[test]
    fn the_client_never_reads_why_the_authorization_server_is_unavailable() {
        let err = AuthError::Unavailable(
            "http://10.1.2.3:8080/introspect: connection failed: refused".into(),
        );
        assert_eq!(err.to_string(), "authorization server unavailable");
        assert!(err.detail().unwrap().contains("10.1.2.3"));
        let throttled = AuthError::Throttled {
            retry_after: std::time::Duration::from_millis(1200),
        };
        assert_eq!(throttled.retry_after_secs(), Some(2));
        assert_eq!(err.retry_after_secs(), Some(1));
    }
}
