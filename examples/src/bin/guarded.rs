//! A tool guarded by an OAuth scope. With authorization on (the node's
//! `[auth]` configuration: the resource, the issuers it trusts), every
//! caller needs a valid access token; `whoami` needs nothing more, and
//! `audit_log` needs the scope `audit:read` as well. A token without it is
//! refused before the handler runs, with HTTP 403 `insufficient_scope`
//! naming the scope, so the client can ask its user for more (step-up).
//! The handlers see who calls (`ctx.principal()`), never the token.
//!
//! ```toml
//! # guarded.toml
//! [auth]
//! resource = "https://tools.example.com/mcp"
//! issuers = ["https://auth.example.com"]
//! ```
//!
//! `cargo run -p mcp-cluster-examples --bin guarded -- --bind
//! 127.0.0.1:8080 --config guarded.toml`; every flag of `mcp-node`
//! applies (`mcp_cluster::cli`).

use std::process::ExitCode;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::prelude::*;

/// Who calls, as the token says.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Caller {
    /// The token's subject; "anonymous" when authorization is off.
    subject: String,
    /// The scopes the token grants.
    scopes: Vec<String>,
}

struct Guarded;

#[server(name = "guarded")]
impl Guarded {
    /// Who calls, and with which scopes.
    #[tool]
    async fn whoami(&self, ctx: &RequestContext) -> Json<Caller> {
        Json(match ctx.principal() {
            Some(principal) => Caller {
                subject: principal.subject.clone(),
                scopes: principal.scopes.clone(),
            },
            None => Caller {
                subject: "anonymous".to_owned(),
                scopes: Vec::new(),
            },
        })
    }

    /// Reads the audit log; needs the scope audit:read.
    #[tool(scopes = ["audit:read"])]
    async fn audit_log(&self, ctx: &RequestContext) -> Result<String, HandlerError> {
        // Only a token with the scope gets here when authorization is on.
        // Without authorization there is no principal, and the tool refuses
        // rather than serve anyone.
        let principal = ctx.principal().ok_or_else(|| {
            HandlerError::tool(
                "audit_log needs an access token with the scope audit:read: turn authorization on",
            )
        })?;
        Ok(format!(
            "Audit log, read by {}: 3 sign-ins, 1 key rotation, 0 failed checks.",
            principal.subject
        ))
    }
}

fn main() -> ExitCode {
    cli::run(
        Program::new("guarded", env!("CARGO_PKG_VERSION")),
        |config| Guarded.into_builder().page_size(config.page_size).build(),
    )
}
