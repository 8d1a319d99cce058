//! A long-running tool: `process_batch` asks the user to name the batch
//! (an elicitation), then works through its items one by one, reporting
//! progress after each, and stops when the call is cancelled.
//!
//! It works the same in both protocol eras. In a session (2025-11-25 and
//! before) the question is a request to the client on the call's stream,
//! and `elicit` waits for the answer. In the stateless era (2026-07-28) the
//! call is answered `input_required` with the question; the client retries
//! with the answer and the handler runs again from the start, where
//! `elicit` returns it. So nothing before the question may have effects
//! that must not repeat.
//!
//! Cancellation: `notifications/cancelled` (a session) or the client
//! closing the call's response stream (2026-07-28) trips the request's
//! token. An async handler is simply dropped at its next `.await`; this
//! one is declared blocking (each item blocks its thread, as a synchronous
//! library would), and such a handler cannot be interrupted, so it checks
//! `ctx.is_cancelled()` between items and stops itself, logging how far it
//! got.
//!
//! `cargo run -p mcp-cluster-examples --bin long_job -- --bind
//! 127.0.0.1:8080`; every flag of `mcp-node` applies (`mcp_cluster::cli`).

use std::process::ExitCode;
use std::time::Duration;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::prelude::*;
use mcp_cluster::protocol::types::ElicitParams;
use serde_json::json;

/// The user's name for the batch, or why there is none.
enum Named {
    Label(String),
    Refused(String),
}

async fn ask_label(ctx: &RequestContext, items: u32) -> Result<Named, HandlerError> {
    // Named, so that the stateless era's input round carries the answer
    // under `batch_label`. In that era `?` ends this run: the question goes
    // out in the call's answer, and the retry brings the answer.
    let answer = ctx
        .input("batch_label")
        .elicit(ElicitParams {
            message: format!("Process {items} items? Name the batch to start it."),
            requested_schema: json!({
                "type": "object",
                "properties": {"label": {"type": "string", "description": "The batch's name"}},
                "required": ["label"],
            }),
        })
        .await?;
    let label = answer
        .content
        .as_ref()
        .and_then(|content| content.get("label"))
        .and_then(|label| label.as_str());
    Ok(match (answer.action.as_str(), label) {
        ("accept", Some(label)) if !label.trim().is_empty() => {
            Named::Label(label.trim().to_owned())
        }
        ("accept", _) => Named::Refused("the batch got no name".to_owned()),
        (action, _) => Named::Refused(format!("the user chose {action}")),
    })
}

struct LongJob;

#[server(name = "long-job")]
impl LongJob {
    /// Processes a batch of items after asking the user to name it; reports
    /// progress and stops when cancelled.
    #[tool(blocking)]
    async fn process_batch(
        &self,
        /// How many items to process.
        #[schemars(range(min = 1, max = 1000))]
        items: u32,
        /// Milliseconds each item takes; 200 when absent.
        #[schemars(range(max = 10000))]
        item_ms: Option<u64>,
        ctx: &RequestContext,
    ) -> Result<String, HandlerError> {
        let label = match ask_label(ctx, items).await? {
            Named::Label(label) => label,
            Named::Refused(why) => return Ok(format!("Batch not started: {why}.")),
        };
        let item = Duration::from_millis(item_ms.unwrap_or(200));
        for done in 0..items {
            if ctx.is_cancelled() {
                tracing::info!(batch = %label, done, items, "Batch cancelled: stopped.");
                return Err(HandlerError::tool("cancelled"));
            }
            // One item: work that blocks its thread (the tool is declared
            // blocking, so it runs on the node's blocking pool).
            std::thread::sleep(item);
            let message = format!("{label}: item {} of {items} done", done + 1);
            // A no-op unless the call carries a progressToken.
            ctx.progress(f64::from(done + 1), Some(f64::from(items)), Some(message))
                .await
                .ok();
        }
        tracing::info!(batch = %label, items, "Batch finished.");
        Ok(format!("Batch {label}: {items} items processed."))
    }
}

fn main() -> ExitCode {
    cli::run(
        Program::new("long-job", env!("CARGO_PKG_VERSION")),
        |config| LongJob.into_builder().page_size(config.page_size).build(),
    )
}
