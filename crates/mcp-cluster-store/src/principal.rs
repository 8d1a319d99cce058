//! Who a request acts for: the principal of a validated access token.

use std::fmt;

/// The authenticated caller of a request: who issued its access token, for
/// whom, to which client, with which scopes.
///
/// A session is bound to the [`Principal::key`] of the principal that
/// created it; quotas are counted per key. Scopes and client id belong to
/// one token: the next token of the same principal may carry others.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Principal {
    /// The token's issuer (`iss`), an HTTPS URL without query or fragment.
    pub issuer: String,
    /// The subject (`sub`) the issuer vouches for.
    pub subject: String,
    /// The OAuth client the token was issued to (`client_id` or `azp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The scopes granted (`scope`, space-separated, or `scp`).
    pub scopes: Vec<String>,
}

impl Principal {
    /// The principal's identity, the same for every token the issuer gives
    /// the subject: `<issuer>#<subject>`. Unambiguous, as an issuer has no
    /// fragment (RFC 8414 section 2).
    pub fn key(&self) -> String {
        format!("{}#{}", self.issuer, self.subject)
    }

    /// The token grants `scope`.
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

impl fmt::Debug for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Principal")
            .field("issuer", &self.issuer)
            .field("subject", &self.subject)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes.join(" "))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_scopes() {
        let p = Principal {
            issuer: "https://idp.example".into(),
            subject: "alice".into(),
            client_id: None,
            scopes: vec!["mcp:tools".into(), "read".into()],
        };
        assert_eq!(p.key(), "https://idp.example#alice");
        assert!(p.has_scope("read"));
        assert!(!p.has_scope("write"));
    }
}
