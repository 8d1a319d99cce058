//! [`ResourceMetadata`]: the protected resource metadata (RFC 9728) and the
//! `WWW-Authenticate` challenges (RFC 6750) that point clients to it.

use serde_json::json;
use url::Url;

use crate::config::AuthConfig;
use crate::error::AuthError;

/// The well-known path of protected resource metadata (RFC 9728 3.1).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document and where it is served.
#[derive(Debug, Clone)]
pub struct ResourceMetadata {
    /// The JSON document.
    document: String,
    /// Where clients find it: the resource's origin, the well-known path,
    /// then the resource's path (`https://h/.well-known/oauth-protected-resource/mcp`).
    url: String,
    /// Paths served on this node: the path-suffixed form, and the bare one
    /// (clients that ignore the resource's path try it).
    paths: Vec<String>,
    /// `scope` of a challenge without a token: the scopes every request
    /// needs, space-separated.
    required: String,
}

impl ResourceMetadata {
    #[cfg_attr(not(feature = "verify"), allow(dead_code))]
    pub(crate) fn new(config: &AuthConfig, resource: &Url) -> Self {
        let mut document = serde_json::Map::new();
        document.insert("resource".into(), json!(config.resource));
        document.insert("authorization_servers".into(), json!(config.issuers));
        let scopes = config.advertised_scopes();
        if !scopes.is_empty() {
            document.insert("scopes_supported".into(), json!(scopes));
        }
        document.insert("bearer_methods_supported".into(), json!(["header"]));
        document.insert(
            "resource_signing_alg_values_supported".into(),
            json!(config.algorithms),
        );
        if let Some(name) = &config.resource_name {
            document.insert("resource_name".into(), json!(name));
        }
        if let Some(doc) = &config.resource_documentation {
            document.insert("resource_documentation".into(), json!(doc));
        }
        let suffix = resource.path().trim_end_matches('/');
        let suffixed = format!("{WELL_KNOWN}{suffix}");
        let mut url = resource.clone();
        url.set_path(&suffixed);
        url.set_query(None);
        let mut paths = vec![suffixed];
        if !suffix.is_empty() {
            paths.push(WELL_KNOWN.to_owned());
        }
        Self {
            document: serde_json::Value::Object(document).to_string(),
            url: url.to_string(),
            paths,
            required: config.required_scopes.join(" "),
        }
    }

    /// The JSON document.
    pub fn document(&self) -> &str {
        &self.document
    }

    /// Its URL, as `resource_metadata` names it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The paths this node serves it at.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }

    /// The `WWW-Authenticate` value answering `err` (401 and 403 answers).
    pub fn challenge(&self, err: &AuthError) -> String {
        let mut value = format!("Bearer resource_metadata=\"{}\"", self.url);
        let mut param = |name: &str, v: &str| {
            value.push_str(&format!(", {name}=\"{}\"", quoted(v)));
        };
        match err {
            AuthError::Missing => {
                if !self.required.is_empty() {
                    param("scope", &self.required);
                }
            }
            AuthError::MalformedHeader => {
                param("error", "invalid_request");
                param("error_description", &err.to_string());
            }
            AuthError::Invalid(_) => {
                param("error", "invalid_token");
                param("error_description", &err.to_string());
            }
            AuthError::InsufficientScope(scopes) => {
                param("error", "insufficient_scope");
                param("scope", &scopes.join(" "));
                param("error_description", &err.to_string());
            }
            AuthError::Unavailable(_) | AuthError::Throttled { .. } => {}
        }
        value
    }
}

/// A quoted-string's content: no `"` or `\` (RFC 6750 3: error
/// descriptions are printable ASCII without them).
fn quoted(v: &str) -> String {
    v.chars()
        .filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Rejection;

    fn metadata(resource: &str) -> ResourceMetadata {
        let config = AuthConfig {
            resource: resource.into(),
            issuers: vec!["https://idp.example".into()],
            required_scopes: vec!["mcp".into()],
            ..AuthConfig::default()
        };
        let url = Url::parse(resource).unwrap();
        ResourceMetadata::new(&config, &url)
    }

    #[test]
    fn the_document_names_the_resource_issuers_and_scopes() {
        let m = metadata("https://mcp.example.com/mcp");
        let doc: serde_json::Value = serde_json::from_str(m.document()).unwrap();
        assert_eq!(doc["resource"], "https://mcp.example.com/mcp");
        assert_eq!(doc["authorization_servers"], json!(["https://idp.example"]));
        assert_eq!(doc["scopes_supported"], json!(["mcp"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
        assert_eq!(
            m.url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            m.paths(),
            ["/.well-known/oauth-protected-resource/mcp", WELL_KNOWN]
        );
        let root = metadata("https://mcp.example.com/");
        assert_eq!(root.paths(), [WELL_KNOWN]);
        assert_eq!(
            root.url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn challenges_follow_rfc_6750() {
        let m = metadata("https://mcp.example.com/mcp");
        let url = m.url().to_owned();
        assert_eq!(
            m.challenge(&AuthError::Missing),
            format!("Bearer resource_metadata=\"{url}\", scope=\"mcp\"")
        );
        let expired = m.challenge(&AuthError::Invalid(Rejection::Expired));
        assert!(expired.contains("error=\"invalid_token\""), "{expired}");
        assert!(expired.contains("error_description=\"the access token has expired\""));
        let scope = m.challenge(&AuthError::InsufficientScope(vec![
            "mcp".into(),
            "admin".into(),
        ]));
        assert!(scope.contains("error=\"insufficient_scope\""), "{scope}");
        assert!(scope.contains("scope=\"mcp admin\""), "{scope}");
        assert_eq!(quoted("a\"b\\c\nd"), "abcd");
    }
}
