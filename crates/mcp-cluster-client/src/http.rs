//! [`HttpOptions`]: how the client's HTTP connections are made, for servers
//! that are not a local test node: a CA to trust for `https://`, a bearer
//! token and extra headers on every request (an API gateway's key, a
//! tenant header).
//!
//! The options build a `reqwest` client (or its builder, for callers that
//! add their own timeouts and pool settings); [`crate::Client`] then sends
//! every request through it, so the token and headers go with `initialize`,
//! every POST, GET and DELETE alike.

use std::fmt;
use std::path::PathBuf;

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use crate::ClientError;

/// How HTTP connections are made. `Debug` redacts the token and the value of
/// an `Authorization` header.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HttpOptions {
    /// PEM file of the CA certificates trusted for `https://` URLs, instead
    /// of the system's roots. `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Sent as `Authorization: Bearer <token>` with every request.
    pub bearer_token: Option<String>,
    /// Extra headers sent with every request, as (name, value); an
    /// `Authorization` among them replaces the bearer token's.
    pub headers: Vec<(String, String)>,
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| {
                let shown = if is_secret(name) { "***" } else { value };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("HttpOptions")
            .field("ca_file", &self.ca_file)
            .field("bearer_token", &self.bearer_token.as_ref().map(|_| "***"))
            .field("headers", &headers)
            .finish()
    }
}

/// Whether a header's value is a credential (never shown).
fn is_secret(name: &str) -> bool {
    ["authorization", "proxy-authorization", "cookie"]
        .iter()
        .any(|secret| name.eq_ignore_ascii_case(secret))
}

impl HttpOptions {
    /// A `reqwest` client builder with these options applied: the CA as the
    /// only trusted root when set, the token and headers as default headers
    /// (credentials marked sensitive, so `reqwest` never logs them).
    ///
    /// # Errors
    /// [`ClientError::Config`] when the CA file cannot be read or holds no
    /// PEM certificate, or a header name or value is invalid.
    pub fn builder(&self) -> Result<reqwest::ClientBuilder, ClientError> {
        let mut builder = reqwest::Client::builder().default_headers(self.default_headers()?);
        if self.ca_file.is_none() {
            builder = with_system_roots(builder);
        }
        if let Some(path) = &self.ca_file {
            let bad =
                |what: String| ClientError::Config(format!("ca file {}: {what}", path.display()));
            let pem = std::fs::read(path).map_err(|err| bad(err.to_string()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|err| bad(format!("not PEM certificates ({err})")))?;
            if certs.is_empty() {
                return Err(bad("no PEM certificate in it".to_owned()));
            }
            // Only this CA: a test of a private deployment must not pass
            // because some public CA vouches for the name.
            builder = builder.tls_built_in_root_certs(false);
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        Ok(builder)
    }

    /// A `reqwest` client with these options (and `reqwest`'s defaults for
    /// the rest).
    ///
    /// # Errors
    /// As [`Self::builder`], or the TLS setup failed.
    pub fn client(&self) -> Result<reqwest::Client, ClientError> {
        Ok(self.builder()?.build()?)
    }

    /// The headers sent with every request.
    fn default_headers(&self) -> Result<HeaderMap, ClientError> {
        let mut headers = HeaderMap::new();
        let explicit_authorization = self
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(AUTHORIZATION.as_str()));
        if let Some(token) = &self.bearer_token
            && !explicit_authorization
        {
            let mut value =
                HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
                    ClientError::Config("the bearer token is not a valid header value".into())
                })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        // A header given twice is sent twice.
        for (name, value) in &self.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ClientError::Config(format!("invalid header name {name:?}")))?;
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| ClientError::Config(format!("invalid value for header {name}")))?;
            value.set_sensitive(is_secret(name));
            headers.append(header, value);
        }
        Ok(headers)
    }
}

/// Parses `Name: value` (the form of curl's `-H`): the name up to the first
/// colon, the value after it, both trimmed.
///
/// # Errors
/// [`ClientError::Config`] without a colon or with an empty name.
pub fn parse_header(line: &str) -> Result<(String, String), ClientError> {
    let Some((name, value)) = line.split_once(':') else {
        return Err(ClientError::Config(format!(
            "header {:?} is not `Name: value`",
            redact_header(line)
        )));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(ClientError::Config("a header has no name".into()));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

/// A `Name: value` line as it may be shown: the value of a credential
/// header replaced by `***`.
pub fn redact_header(line: &str) -> String {
    match line.split_once(':') {
        Some((name, _)) if is_secret(name.trim()) => format!("{name}: ***"),
        _ => line.to_owned(),
    }
}

/// A client with `reqwest`'s defaults and the system's trusted roots: what
/// [`crate::Client::new`] uses.
pub fn default_client() -> reqwest::Client {
    with_system_roots(reqwest::Client::builder())
        .build()
        // The builder has nothing that can fail but TLS, set up already.
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// `builder` trusting the system's roots, loaded once per process: `reqwest`
/// loads them anew for every client it builds (18 ms a client in a debug
/// build), and a load test opens thousands of sessions, each with its own
/// client (and connection pool).
fn with_system_roots(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    static TLS: std::sync::LazyLock<Option<rustls::ClientConfig>> =
        std::sync::LazyLock::new(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .ok()
                .map(|config| config.with_root_certificates(roots).with_no_client_auth())
        });
    match &*TLS {
        Some(config) => builder.use_preconfigured_tls(config.clone()),
        None => builder,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_like_curl_and_credentials_stay_hidden() {
        assert_eq!(
            parse_header("X-Tenant:  blue ").unwrap(),
            ("X-Tenant".to_owned(), "blue".to_owned())
        );
        assert_eq!(
            parse_header("X-Empty:").unwrap(),
            ("X-Empty".to_owned(), String::new())
        );
        assert!(parse_header("no colon").is_err());
        assert!(parse_header(": value").is_err());
        assert_eq!(
            redact_header("authorization: Bearer abc"),
            "authorization: ***"
        );
        assert_eq!(redact_header("X-Tenant: blue"), "X-Tenant: blue");
        let options = HttpOptions {
            bearer_token: Some("s3cret".into()),
            headers: vec![
                ("Cookie".into(), "id=s3cret".into()),
                ("X-Tenant".into(), "blue".into()),
            ],
            ..HttpOptions::default()
        };
        let debug = format!("{options:?}");
        assert!(
            !debug.contains("s3cret") && debug.contains("blue"),
            "{debug}"
        );
    }

    #[test]
    fn the_token_and_headers_become_default_headers() {
        let options = HttpOptions {
            bearer_token: Some(" abc\n".into()),
            headers: vec![
                ("X-Tenant".into(), "blue".into()),
                ("X-Tenant".into(), "green".into()),
            ],
            ..HttpOptions::default()
        };
        let headers = options.default_headers().unwrap();
        assert_eq!(headers[AUTHORIZATION], "Bearer abc");
        assert!(headers[AUTHORIZATION].is_sensitive());
        let tenants: Vec<_> = headers.get_all("x-tenant").iter().collect();
        assert_eq!(tenants, ["blue", "green"]);
        // An explicit Authorization wins over the token.
        let explicit = HttpOptions {
            bearer_token: Some("abc".into()),
            headers: vec![("Authorization".into(), "Basic eDp5".into())],
            ..HttpOptions::default()
        };
        let headers = explicit.default_headers().unwrap();
        let auth: Vec<_> = headers.get_all(AUTHORIZATION).iter().collect();
        assert_eq!(auth, ["Basic eDp5"]);
        let bad = HttpOptions {
            headers: vec![("Bad Name".into(), "x".into())],
            ..HttpOptions::default()
        };
        assert!(matches!(bad.default_headers(), Err(ClientError::Config(_))));
    }

    #[test]
    fn a_ca_file_must_hold_certificates() {
        let missing = HttpOptions {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..HttpOptions::default()
        };
        let err = missing.builder().unwrap_err().to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
        let dir = std::env::temp_dir().join(format!("mcp-client-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let not_pem = HttpOptions {
            ca_file: Some(empty),
            ..HttpOptions::default()
        };
        assert!(matches!(not_pem.builder(), Err(ClientError::Config(_))));
        let _ = std::fs::remove_dir_all(dir);
    }
}
