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
use mcp_cluster::protocol::ErrorObject;
use mcp_cluster::protocol::types::CallToolResult;
use mcp_cluster::{McpServer, NodeConfig, RequestContext, ServerBuilder, ToolDef};
use serde::{Deserialize, Serialize};

/// The scope `audit_log` needs.
const AUDIT_SCOPE: &str = "audit:read";

type Outcome = Result<CallToolResult, ErrorObject>;

#[derive(Deserialize, schemars::JsonSchema)]
struct NoArgs {}

/// Who calls, as the token says.
#[derive(Serialize, schemars::JsonSchema)]
struct Caller {
    /// The token's subject; "anonymous" when authorization is off.
    subject: String,
    /// The scopes the token grants.
    scopes: Vec<String>,
}

fn structured<T: Serialize>(value: &T) -> Outcome {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => Ok(CallToolResult::structured(object)),
        _ => Err(ErrorObject::internal("result is not an object")),
    }
}

async fn whoami(_: NoArgs, ctx: RequestContext) -> Outcome {
    let caller = match ctx.principal() {
        Some(principal) => Caller {
            subject: principal.subject.clone(),
            scopes: principal.scopes.clone(),
        },
        None => Caller {
            subject: "anonymous".to_owned(),
            scopes: Vec::new(),
        },
    };
    structured(&caller)
}

async fn audit_log(_: NoArgs, ctx: RequestContext) -> Outcome {
    // Only a token with the scope gets here when authorization is on
    // (`.scopes` below). Without authorization there is no principal, and
    // the tool refuses rather than serve anyone.
    let Some(principal) = ctx.principal() else {
        return Ok(CallToolResult::error(format!(
            "audit_log needs an access token with the scope {AUDIT_SCOPE}: turn authorization on"
        )));
    };
    Ok(CallToolResult::text(format!(
        "Audit log, read by {}: 3 sign-ins, 1 key rotation, 0 failed checks.",
        principal.subject
    )))
}

fn server(config: &NodeConfig) -> McpServer {
    ServerBuilder::new("guarded", env!("CARGO_PKG_VERSION"))
        .page_size(config.page_size)
        .tool(
            ToolDef::typed("whoami", "Who calls, and with which scopes.", whoami)
                .output::<Caller>(),
        )
        .tool(
            ToolDef::typed(
                "audit_log",
                "Reads the audit log; needs the scope audit:read.",
                audit_log,
            )
            .scopes([AUDIT_SCOPE]),
        )
        .build()
}

fn main() -> ExitCode {
    cli::run(Program::new("guarded", env!("CARGO_PKG_VERSION")), server)
}
