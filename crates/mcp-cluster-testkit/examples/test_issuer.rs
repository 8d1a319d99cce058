//! The test authorization server as a process, for load tests and manual
//! runs against a node with authorization on:
//!
//! ```text
//! cargo run -p mcp-cluster-testkit --example test_issuer -- http://127.0.0.1:8080/mcp 64
//! ```
//!
//! Prints the issuer URL on the first line, then N tokens (one per line,
//! subjects `user-0` … `user-N-1`, audience the given resource, scope
//! `mcp:tools`, valid one hour), then serves until it is killed.

use std::io::Write as _;

use anyhow::Context;
use mcp_cluster_testkit::TestIssuer;

/// How long the printed tokens are valid, in seconds.
const LIFETIME_SECS: i64 = 3600;

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let audience = args
        .next()
        .context("usage: test_issuer RESOURCE_URL [TOKENS]")?;
    let count: usize = args.next().map_or(Ok(1), |n| n.parse())?;
    let issuer = TestIssuer::start().await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", issuer.issuer())?;
    for i in 0..count {
        let token = issuer
            .token()
            .audience(audience.as_str())
            .subject(format!("user-{i}"))
            .scopes(["mcp:tools"])
            .expires_in(LIFETIME_SECS)
            .sign();
        writeln!(out, "{token}")?;
    }
    out.flush()?;
    drop(out);
    // The server runs on its own thread; this one only keeps it alive.
    let _serving = issuer;
    std::future::pending::<()>().await;
    Ok(())
}
