//! Built-in tools and prompts that ask the client (elicitation, sampling,
//! roots) and the list-change triggers: the fixtures of the conformance
//! suite's 2026-07-28 set. Each is ordinary provider code: in a session it
//! sends a server-to-client request and waits; in the stateless era the same
//! code yields an `input_required` result and completes on the retry.

use std::sync::{Arc, OnceLock};

use mcp_cluster::{AskError, McpServer, PromptDef, RequestContext, ServerEvent, ToolDef};
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{
    CallToolResult, Content, CreateMessageParams, ElicitParams, ElicitResult, GetPromptResult,
    LoggingLevel, PromptMessage, SamplingMessage,
};
use serde_json::{Value, json};

use crate::builtins::no_args;

type ToolResult = Result<CallToolResult, ErrorObject>;

fn form(message: &str, properties: Value, required: &[&str]) -> ElicitParams {
    ElicitParams {
        message: message.to_owned(),
        requested_schema: json!({
            "type": "object",
            "properties": properties,
            "required": required,
        }),
    }
}

fn ask_model(text: &str, max_tokens: u32) -> CreateMessageParams {
    CreateMessageParams::new(
        vec![SamplingMessage {
            role: "user".into(),
            content: json!({"type": "text", "text": text}),
        }],
        max_tokens,
    )
}

/// A field of an accepted elicitation, as text.
fn accepted(result: &ElicitResult, field: &str) -> Option<String> {
    (result.action == "accept")
        .then_some(result.content.as_ref()?.get(field)?)
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
}

/// A tool's answer when asking failed: the reason, as a tool error.
fn failed(what: &str, err: &AskError) -> CallToolResult {
    CallToolResult::error(format!("{what} failed: {err}"))
}

fn name_form() -> ElicitParams {
    form(
        "What is your name?",
        json!({"name": {"type": "string"}}),
        &["name"],
    )
}

fn confirm_form() -> ElicitParams {
    form(
        "Please confirm",
        json!({"ok": {"type": "boolean"}}),
        &["ok"],
    )
}

async fn confirm(ctx: &RequestContext) -> ToolResult {
    Ok(match ctx.input("confirm").elicit(confirm_form()).await {
        Ok(r) if accepted(&r, "ok").as_deref() == Some("true") => {
            CallToolResult::text("state-ok: confirmed")
        }
        Ok(r) => CallToolResult::text(format!("state-ok: not confirmed ({})", r.action)),
        Err(err) => failed("confirmation", &err),
    })
}

pub(crate) fn tools(server: &Arc<OnceLock<McpServer>>) -> Vec<ToolDef> {
    let trigger = |name: &str, description: &str, event: ServerEvent| {
        let server = Arc::clone(server);
        no_args(name, description, move |_| {
            let server = Arc::clone(&server);
            let event = event.clone();
            async move {
                if let Some(s) = server.get() {
                    s.announce(event);
                }
                Ok(CallToolResult::text("Change announced."))
            }
        })
    };
    let region = ToolDef::new(
        "test_header_param",
        "Echoes its region, which clients mirror into the Mcp-Param-Region header (x-mcp-header).",
        json!({
            "type": "object",
            "properties": {
                "region": {"type": "string", "description": "A region name.", "x-mcp-header": "Region"}
            },
            "required": ["region"],
        }),
        |args, _| async move {
            let region = args
                .get("region")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Ok(CallToolResult::text(format!("Region: {region}")))
        },
    );
    let mut tools: Vec<ToolDef> = region.into_iter().collect();
    tools.extend([
        no_args(
            "test_missing_capability",
            "Needs the client's sampling capability; without it the request is refused (2026-07-28: -32021).",
            |ctx| async move {
                Ok(match ctx.create_message(ask_model("Say hello.", 20)).await {
                    Ok(r) => CallToolResult::text(format!("Success: {}", r.content)),
                    Err(err) => failed("sampling", &err),
                })
            },
        ),
        no_args(
            "test_streaming_elicitation",
            "Asks the user for their name; never as a request on the response stream in 2026-07-28.",
            |ctx| async move {
                Ok(match ctx.input("user_name").elicit(name_form()).await {
                    Ok(r) => CallToolResult::text(format!(
                        "Hello, {}!",
                        accepted(&r, "name").unwrap_or_else(|| "stranger".into())
                    )),
                    Err(err) => failed("elicitation", &err),
                })
            },
        ),
        no_args(
            "test_logging_tool",
            "Logs one message at info, sent only when the request asks for a log level.",
            |ctx| async move {
                let _ = ctx
                    .log(LoggingLevel::Info, Some("test"), json!("test_logging_tool ran"))
                    .await;
                Ok(CallToolResult::text("Logged."))
            },
        ),
        trigger(
            "test_trigger_tool_change",
            "Announces a tool list change to every listening client.",
            ServerEvent::ToolsListChanged,
        ),
        trigger(
            "test_trigger_prompt_change",
            "Announces a prompt list change to every listening client.",
            ServerEvent::PromptsListChanged,
        ),
        no_args(
            "test_input_required_result_elicitation",
            "Asks the user's name (input user_name) and greets them.",
            |ctx| async move {
                Ok(match ctx.input("user_name").elicit(name_form()).await {
                    Ok(r) => match accepted(&r, "name") {
                        Some(name) => CallToolResult::text(format!("Hello, {name}!")),
                        None => CallToolResult::text(format!("No name given ({}).", r.action)),
                    },
                    Err(err) => failed("elicitation", &err),
                })
            },
        ),
        no_args(
            "test_input_required_result_sampling",
            "Asks the client's model the capital of France (input capital_question).",
            |ctx| async move {
                let ask = ask_model("What is the capital of France?", 100);
                Ok(match ctx.input("capital_question").create_message(ask).await {
                    Ok(r) => CallToolResult::text(format!(
                        "The model said: {}",
                        r.content.get("text").and_then(Value::as_str).unwrap_or_default()
                    )),
                    Err(err) => failed("sampling", &err),
                })
            },
        ),
        no_args(
            "test_input_required_result_list_roots",
            "Asks the client for its roots (input client_roots) and lists them.",
            |ctx| async move {
                Ok(match ctx.input("client_roots").list_roots().await {
                    Ok(r) => CallToolResult::text(format!(
                        "Roots: {}",
                        r.roots.iter().map(|root| root.uri.as_str()).collect::<Vec<_>>().join(", ")
                    )),
                    Err(err) => failed("roots/list", &err),
                })
            },
        ),
        no_args(
            "test_input_required_result_request_state",
            "Asks for a confirmation (input confirm); the answer comes back with the sealed request state.",
            |ctx| async move { confirm(&ctx).await },
        ),
        no_args(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation (input confirm); a changed request state is refused.",
            |ctx| async move { confirm(&ctx).await },
        ),
        no_args(
            "test_input_required_result_multiple_inputs",
            "Asks three things at once: the user's name, a greeting from the model, the client's roots.",
            |ctx| async move {
                let greeting = ask_model("Generate a greeting", 50);
                let (name, greeting, roots) = tokio::join!(
                    ctx.input("user_name").elicit(name_form()),
                    ctx.input("greeting").create_message(greeting),
                    ctx.input("client_roots").list_roots(),
                );
                Ok(match (name, greeting, roots) {
                    (Ok(name), Ok(greeting), Ok(roots)) => CallToolResult::text(format!(
                        "{} Name: {}. Roots: {}.",
                        greeting.content.get("text").and_then(Value::as_str).unwrap_or_default(),
                        accepted(&name, "name").unwrap_or_default(),
                        roots.roots.len()
                    )),
                    (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => failed("asking", &err),
                })
            },
        ),
        no_args(
            "test_input_required_result_multi_round",
            "Asks the user's name, then (a second round) their favourite colour.",
            |ctx| async move {
                let step1 = form("Step 1: What is your name?", json!({"name": {"type": "string"}}), &["name"]);
                let name = match ctx.input("step1").elicit(step1).await {
                    Ok(r) => accepted(&r, "name").unwrap_or_default(),
                    Err(err) => return Ok(failed("step 1", &err)),
                };
                let step2 = form(
                    "Step 2: What is your favorite color?",
                    json!({"color": {"type": "string"}}),
                    &["color"],
                );
                Ok(match ctx.input("step2").elicit(step2).await {
                    Ok(r) => CallToolResult::text(format!(
                        "{name} likes {}.",
                        accepted(&r, "color").unwrap_or_default()
                    )),
                    Err(err) => failed("step 2", &err),
                })
            },
        ),
        no_args(
            "test_input_required_result_capabilities",
            "Asks only what the client declared it can answer (elicitation, sampling, roots).",
            |ctx| async move {
                let caps = ctx.client_capabilities().cloned().unwrap_or_default();
                let mut said = Vec::new();
                if caps.elicitation.is_some() {
                    match ctx.input("user_name").elicit(name_form()).await {
                        Ok(r) => said.push(format!("name {}", accepted(&r, "name").unwrap_or_default())),
                        Err(err) => return Ok(failed("elicitation", &err)),
                    }
                }
                if caps.sampling.is_some() {
                    match ctx.input("greeting").create_message(ask_model("Generate a greeting", 50)).await {
                        Ok(_) => said.push("a greeting".into()),
                        Err(err) => return Ok(failed("sampling", &err)),
                    }
                }
                if caps.roots.is_some() {
                    match ctx.input("client_roots").list_roots().await {
                        Ok(r) => said.push(format!("{} roots", r.roots.len())),
                        Err(err) => return Ok(failed("roots/list", &err)),
                    }
                }
                Ok(CallToolResult::text(format!("Asked for: {}.", said.join(", "))))
            },
        ),
    ]);
    tools
}

pub(crate) fn prompts() -> Vec<PromptDef> {
    vec![PromptDef::new(
        "test_input_required_result_prompt",
        "A prompt that asks the user for context first (input user_context).",
        |_, ctx: RequestContext| async move {
            let ask = form(
                "What context should the prompt use?",
                json!({"context": {"type": "string"}}),
                &["context"],
            );
            let context = match ctx.input("user_context").elicit(ask).await {
                Ok(r) => accepted(&r, "context").unwrap_or_default(),
                Err(err) => {
                    return Err(ErrorObject::internal(format!("elicitation failed: {err}")));
                }
            };
            Ok(GetPromptResult {
                description: None,
                messages: vec![PromptMessage::user(Content::text(format!(
                    "Use this context: {context}"
                )))],
            })
        },
    )]
}
