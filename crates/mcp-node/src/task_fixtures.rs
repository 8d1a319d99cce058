//! Built-in tools that run as tasks (the 2026-07-28 tasks extension) for
//! clients that declare it: the fixtures the conformance suite's tasks
//! scenarios call. Each is ordinary provider code; the runtime decides
//! whether a call is answered at once or with a task handle.

use std::time::Duration;

use mcp_cluster::{RequestContext, TaskSupport, ToolDef};
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{CallToolResult, ElicitParams, ElicitResult};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::builtins::no_args;

/// Longest `slow_compute` accepts, in seconds.
const MAX_COMPUTE_SECS: f64 = 600.0;

#[derive(Debug, Deserialize, JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ComputeArgs {
    /// How long the computation takes, in seconds (at most 600).
    seconds: f64,
    /// A label for the result.
    label: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct FileArgs {
    /// The file to delete.
    filename: String,
}

/// Sleeps `duration` unless the request is cancelled first (`false`).
async fn work(ctx: &RequestContext, duration: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(duration) => true,
        () = ctx.cancelled() => false,
    }
}

fn accepted(result: &ElicitResult, field: &str) -> Option<Value> {
    (result.action == "accept")
        .then(|| result.content.as_ref()?.get(field).cloned())
        .flatten()
}

fn question(message: String, properties: Value, required: &[&str]) -> ElicitParams {
    ElicitParams {
        message,
        requested_schema: json!({"type": "object", "properties": properties, "required": required}),
    }
}

pub(crate) fn tools() -> Vec<ToolDef> {
    vec![
        ToolDef::typed(
            "greet",
            "Greets by name, at once (never a task).",
            |a: GreetArgs, _| async move { Ok(CallToolResult::text(format!("Hello, {}!", a.name))) },
        ),
        ToolDef::typed(
            "slow_compute",
            "Computes for `seconds`; a task for clients of the tasks extension, cancellable.",
            |a: ComputeArgs, ctx: RequestContext| async move {
                if !(0.0..=MAX_COMPUTE_SECS).contains(&a.seconds) {
                    return Ok(CallToolResult::error(format!(
                        "seconds must be between 0 and {MAX_COMPUTE_SECS}"
                    )));
                }
                if !work(&ctx, Duration::from_secs_f64(a.seconds)).await {
                    return Err(ErrorObject::internal("cancelled"));
                }
                Ok(CallToolResult::text(format!(
                    "Computed {} in {} s.",
                    a.label, a.seconds
                )))
            },
        )
        .task(TaskSupport::Optional),
        no_args(
            "failing_job",
            "Runs for a second as a task, then fails as a tool (isError); only as a task.",
            |ctx| async move {
                work(&ctx, Duration::from_secs(1)).await;
                Ok(CallToolResult::error("the job failed, as it always does"))
            },
        )
        .task(TaskSupport::Required),
        no_args(
            "protocol_error_job",
            "Runs briefly as a task, then fails with a JSON-RPC error.",
            |ctx| async move {
                work(&ctx, Duration::from_millis(200)).await;
                Err(ErrorObject::internal(
                    "the job failed with a protocol error",
                ))
            },
        )
        .task(TaskSupport::Optional),
        ToolDef::typed(
            "confirm_delete",
            "Asks the user to confirm (input confirm), then says whether it deleted the file.",
            |a: FileArgs, ctx: RequestContext| async move {
                let ask = question(
                    format!("Delete {}?", a.filename),
                    json!({"confirm": {"type": "boolean"}}),
                    &["confirm"],
                );
                Ok(match ctx.input("confirm").elicit(ask).await {
                    Ok(r) if accepted(&r, "confirm") == Some(json!(true)) => {
                        CallToolResult::text(format!("Deleted {}.", a.filename))
                    }
                    Ok(_) => CallToolResult::text(format!("Kept {}.", a.filename)),
                    Err(err) => CallToolResult::error(format!("confirmation failed: {err}")),
                })
            },
        )
        .task(TaskSupport::Optional),
        no_args(
            "multi_input",
            "Asks two questions at once (inputs first and second), then answers with both.",
            |ctx| async move {
                let ask = |n: &str| {
                    question(
                        format!("Part {n}: a name and a confirmation"),
                        json!({"name": {"type": "string"}, "confirm": {"type": "boolean"}}),
                        &["name"],
                    )
                };
                let (first, second) = tokio::join!(
                    ctx.input("first").elicit(ask("one")),
                    ctx.input("second").elicit(ask("two")),
                );
                Ok(match (first, second) {
                    (Ok(a), Ok(b)) => CallToolResult::text(format!(
                        "Got {} and {}.",
                        accepted(&a, "name").unwrap_or_default(),
                        accepted(&b, "name").unwrap_or_default()
                    )),
                    (Err(err), _) | (_, Err(err)) => {
                        CallToolResult::error(format!("asking failed: {err}"))
                    }
                })
            },
        )
        .task(TaskSupport::Optional),
        no_args(
            "test_tool_with_task",
            "Asks the user's name first (an input-required round), then greets them as a task.",
            |ctx| async move {
                let ask = question(
                    "What is your name?".into(),
                    json!({"name": {"type": "string"}}),
                    &["name"],
                );
                let name = match ctx.input("user_name").elicit(ask).await {
                    Ok(r) => accepted(&r, "name")
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "stranger".into()),
                    Err(err) => {
                        return Ok(CallToolResult::error(format!("elicitation failed: {err}")));
                    }
                };
                ctx.become_task().await;
                work(&ctx, Duration::from_millis(500)).await;
                Ok(CallToolResult::text(format!(
                    "Hello, {name}! (from a task)"
                )))
            },
        )
        .task(TaskSupport::Required)
        .task_starts_in_handler(),
    ]
}
