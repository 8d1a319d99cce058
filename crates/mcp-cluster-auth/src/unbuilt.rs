//! The [`Authenticator`] of a build without the `verify` feature: the same
//! interface, but [`Authenticator::new`] refuses, so none exists and a
//! node configured for authorization does not start.

use std::net::IpAddr;
use std::sync::Arc;

use crate::config::{AuthConfig, ConfigError};
use crate::error::AuthError;
use crate::metadata::ResourceMetadata;
use mcp_cluster_store::Principal;

/// The resource server. In this build (no `verify` feature) it cannot be
/// made: [`Authenticator::new`] always refuses.
#[derive(Debug)]
pub struct Authenticator {
    never: std::convert::Infallible,
}

impl Authenticator {
    /// Refuses: this build validates no tokens.
    ///
    /// # Errors
    /// Always: the settings' own error if they cannot work, else that the
    /// build lacks token validation.
    pub fn new(config: AuthConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Err(ConfigError {
            setting: "issuers",
            problem: "this build validates no tokens: it was built without the `auth` feature \
                      (of mcp-cluster; `verify` of mcp-cluster-auth)"
                .to_owned(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &AuthConfig {
        match self.never {}
    }

    /// The protected resource metadata.
    pub fn metadata(&self) -> &ResourceMetadata {
        match self.never {}
    }

    /// Fetches every issuer's keys.
    pub async fn prefetch(&self) {
        match self.never {}
    }

    /// Validates the `Authorization` header of a request.
    ///
    /// # Errors
    /// Why the request is not authorized.
    pub async fn authenticate(
        &self,
        _header: Option<&[u8]>,
        _client: Option<IpAddr>,
    ) -> Result<Arc<Principal>, AuthError> {
        match self.never {}
    }

    /// Checks that `principal` holds every scope in `needed`.
    ///
    /// # Errors
    /// [`AuthError::InsufficientScope`].
    pub fn check_scopes(
        &self,
        _principal: &Principal,
        _needed: &[String],
    ) -> Result<(), AuthError> {
        match self.never {}
    }

    /// The scopes a call of `tool` needs.
    pub fn tool_scopes(&self, _tool: &str, _declared: &[String]) -> Vec<String> {
        match self.never {}
    }

    /// Counts a refused tool call.
    pub fn count_refusal(err: &AuthError) {
        mcp_cluster_telemetry::metrics::metrics()
            .auth_failures
            .with_label_values(&[err.label()])
            .inc();
    }
}
