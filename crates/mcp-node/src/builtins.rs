//! The node's built-in tools, resources and prompts: useful examples, every
//! fixture the official conformance suite calls, and
//! `long_running_operation` for load and resumption tests.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mcp_cluster::tool::schema_of;
use mcp_cluster::{
    McpServer, PromptDef, RequestContext, ResourceDef, ServerBuilder, TemplateDef, ToolDef,
};
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{
    CallToolResult, Content, CreateMessageParams, ElicitParams, GetPromptResult, LoggingLevel,
    PromptMessage, ResourceContents, SamplingMessage, ToolAnnotations,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A 1x1 PNG.
const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC";
/// A short silent WAV (8 kHz, 16-bit mono).
const WAV_BASE64: &str = "UklGRkQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YSAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==";

/// Pause between the steps of the conformance logging and progress tools.
const FIXTURE_STEP: Duration = Duration::from_millis(50);

/// The built-in server.
pub(crate) fn server(page_size: usize) -> McpServer {
    let handle: Arc<OnceLock<McpServer>> = Arc::new(OnceLock::new());
    let mut b = ServerBuilder::new("mcp-node", env!("CARGO_PKG_VERSION"))
        .page_size(page_size)
        .instructions("Built-in tools of an MCP cluster node: echo, add, long_running_operation, and conformance fixtures.");
    for tool in tools(&handle)
        .into_iter()
        .chain(crate::input_fixtures::tools(&handle))
        .chain(crate::task_fixtures::tools())
        .chain(crate::revision_fixtures::tools())
    {
        b = b.tool(tool);
    }
    for resource in resources() {
        b = b.resource(resource);
    }
    for template in templates() {
        b = b.template(template);
    }
    for prompt in prompts()
        .into_iter()
        .chain(crate::input_fixtures::prompts())
    {
        b = b.prompt(prompt);
    }
    let server = b.build();
    let _ = handle.set(server.clone());
    server
}

type ToolResult = Result<CallToolResult, ErrorObject>;

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to send back.
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AddArgs {
    /// First addend.
    a: f64,
    /// Second addend.
    b: f64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct Sum {
    /// a + b.
    sum: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct LongRunningArgs {
    /// Total duration in milliseconds (at most 600000).
    #[serde(default = "default_duration")]
    duration_ms: u64,
    /// Number of progress notifications (at most 10000).
    #[serde(default = "default_steps")]
    steps: u64,
    /// After this many progress notifications, close the client's SSE
    /// connection (SEP-1699 polling): the client resumes with Last-Event-ID
    /// after the `retry` interval. Absent: never.
    #[serde(default)]
    close_stream_after: Option<u64>,
}

fn default_duration() -> u64 {
    10_000
}

fn default_steps() -> u64 {
    5
}

#[derive(Debug, Deserialize, JsonSchema)]
struct PromptArgs {
    /// The prompt to send to the client's model.
    prompt: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct MessageArgs {
    /// What to ask the user.
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct UriArgs {
    /// The resource URI.
    uri: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct NoArgs {}

pub(crate) fn no_args<F, Fut>(name: &str, description: &str, f: F) -> ToolDef
where
    F: Fn(RequestContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ToolResult> + Send + 'static,
{
    ToolDef::typed(name, description, move |_: NoArgs, ctx| f(ctx))
}

fn tools(server: &Arc<OnceLock<McpServer>>) -> Vec<ToolDef> {
    let server = Arc::clone(server);
    vec![
        ToolDef::typed("echo", "Echoes the message back.", |a: EchoArgs, _| async move {
            Ok(CallToolResult::text(format!("Echo: {}", a.message)))
        })
        .annotations(ToolAnnotations { read_only_hint: Some(true), ..Default::default() }),
        ToolDef::typed("whoami", "Says who the request acts for: the principal of its access token, or none when authorization is off.", |_: NoArgs, ctx: RequestContext| async move {
            let who = match ctx.principal() {
                Some(p) => serde_json::json!({
                    "authenticated": true,
                    "issuer": p.issuer,
                    "subject": p.subject,
                    "clientId": p.client_id,
                    "scopes": p.scopes,
                }),
                None => serde_json::json!({ "authenticated": false }),
            };
            Ok(CallToolResult::structured(as_object(&who)))
        })
        .annotations(ToolAnnotations { read_only_hint: Some(true), ..Default::default() }),
        ToolDef::typed("add", "Adds two numbers; structured result.", |a: AddArgs, _| async move {
            Ok(CallToolResult::structured(as_object(&Sum { sum: a.a + a.b })))
        })
        .output::<Sum>()
        .icon(crate::revision_fixtures::icon()),
        ToolDef::typed(
            "long_running_operation",
            "Runs for duration_ms, sending `steps` progress notifications spread evenly; stops on cancellation.",
            long_running_operation,
        ),
        ToolDef::typed("list_roots", "Asks the client for its roots (roots/list).", |_: NoArgs, ctx: RequestContext| async move {
            Ok(match ctx.list_roots().await {
                Ok(roots) => CallToolResult::text(serde_json::to_string(&roots.roots).unwrap_or_default()),
                Err(err) => CallToolResult::error(format!("roots/list failed: {err}")),
            })
        }),
        ToolDef::typed(
            "touch_resource",
            "Marks a resource as changed: subscribed clients get notifications/resources/updated.",
            move |a: UriArgs, _| {
                let server = Arc::clone(&server);
                async move {
                    if let Some(s) = server.get() {
                        s.resource_updated(&a.uri);
                    }
                    Ok(CallToolResult::text(format!("Updated {}", a.uri)))
                }
            },
        ),
        no_args("test_simple_text", "Returns simple text content.", |_| async {
            Ok(CallToolResult::text("This is a simple text response for testing."))
        }),
        no_args("test_image_content", "Returns an image.", |_| async { Ok(CallToolResult::success(vec![Content::image(PNG_BASE64, "image/png")])) }),
        no_args("test_audio_content", "Returns audio.", |_| async { Ok(CallToolResult::success(vec![Content::audio(WAV_BASE64, "audio/wav")])) }),
        no_args("test_embedded_resource", "Returns an embedded resource.", |_| async {
            Ok(CallToolResult::success(vec![Content::resource(ResourceContents::text(
                "test://embedded-resource",
                "text/plain",
                "This is an embedded resource content.",
            ))]))
        }),
        no_args("test_multiple_content_types", "Returns text, an image and a resource.", |_| async {
            Ok(CallToolResult::success(vec![
                Content::text("Multiple content types test:"),
                Content::image(PNG_BASE64, "image/png"),
                Content::resource(ResourceContents::text(
                    "test://mixed-content-resource",
                    "application/json",
                    r#"{"test":"data","value":123}"#,
                )),
            ]))
        }),
        no_args("test_tool_with_logging", "Sends log messages while running.", |ctx| async move {
            for (i, text) in ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(FIXTURE_STEP).await;
                }
                let _ = ctx.log(LoggingLevel::Info, None, json!(text)).await;
            }
            Ok(CallToolResult::text("Tool with logging executed successfully"))
        }),
        no_args("test_error_handling", "Always fails as a tool (isError).", |_| async {
            Ok(CallToolResult::error("This tool intentionally returns an error for testing"))
        }),
        no_args("test_tool_with_progress", "Reports progress 0, 50, 100 of 100.", |ctx| async move {
            for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(FIXTURE_STEP).await;
                }
                let _ = ctx.progress(p, Some(100.0), Some(format!("Completed step {i} of 3"))).await;
            }
            Ok(CallToolResult::text("Tool with progress executed successfully"))
        }),
        ToolDef::typed("test_sampling", "Asks the client's model (sampling/createMessage).", |a: PromptArgs, ctx: RequestContext| async move {
            let params = CreateMessageParams::new(
                vec![SamplingMessage { role: "user".into(), content: json!({"type": "text", "text": a.prompt}) }],
                100,
            );
            Ok(match ctx.create_message(params).await {
                Ok(r) => {
                    let text = r.content.get("text").and_then(Value::as_str).unwrap_or_default().to_owned();
                    CallToolResult::text(format!("LLM response: {text}"))
                }
                Err(err) => CallToolResult::error(format!("sampling failed: {err}")),
            })
        }),
        ToolDef::typed("test_elicitation", "Asks the user for a username and an email (elicitation/create).", |a: MessageArgs, ctx: RequestContext| async move {
            let schema = json!({
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}
                },
                "required": ["username", "email"]
            });
            elicit(&ctx, a.message, schema).await
        }),
        no_args("test_elicitation_sep1034_defaults", "Elicitation whose fields have defaults (SEP-1034).", |ctx| async move {
            let schema = json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}
                }
            });
            elicit(&ctx, "Please review and update the form fields with defaults".into(), schema).await
        }),
        no_args("test_elicitation_sep1330_enums", "Elicitation with every enum form (SEP-1330).", |ctx| async move {
            let schema = json!({
                "type": "object",
                "properties": {
                    "untitledSingle": {"type": "string", "description": "Choose an option", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "description": "Choose a titled option", "oneOf": [
                        {"const": "value1", "title": "First Option"},
                        {"const": "value2", "title": "Second Option"},
                        {"const": "value3", "title": "Third Option"}
                    ]},
                    "legacyEnum": {"type": "string", "description": "Choose a legacy option", "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "description": "Choose multiple options", "minItems": 1, "maxItems": 3,
                        "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "description": "Choose multiple titled options", "minItems": 1, "maxItems": 3,
                        "items": {"anyOf": [
                            {"const": "value1", "title": "First Choice"},
                            {"const": "value2", "title": "Second Choice"},
                            {"const": "value3", "title": "Third Choice"}
                        ]}}
                }
            });
            elicit(&ctx, "Please select options from the enum fields".into(), schema).await
        }),
        json_schema_tool(),
        no_args("test_reconnection", "Closes its SSE stream mid-call and answers after the client reconnects (SEP-1699).", |ctx| async move {
            if let Err(err) = ctx.close_sse_stream().await {
                return Ok(CallToolResult::error(format!("could not close the stream: {err}")));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(CallToolResult::text("Reconnection test completed successfully"))
        }),
    ]
}

fn json_schema_tool() -> ToolDef {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "city": {"type": "string"}
                }
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"}
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false
    });
    // expect: the schema above is a fixed, valid JSON Schema 2020-12.
    #[allow(clippy::expect_used)]
    ToolDef::new(
        "json_schema_2020_12_tool",
        "Tool with a JSON Schema 2020-12 input schema ($defs, $ref, $anchor, allOf/anyOf, if/then/else).",
        schema,
        |args, _| async move { Ok(CallToolResult::text(format!("Received: {}", Value::Object(args)))) },
    )
    .expect("fixed schema is valid")
}

async fn long_running_operation(a: LongRunningArgs, ctx: RequestContext) -> ToolResult {
    let duration = a.duration_ms.min(600_000);
    let steps = a.steps.clamp(1, 10_000);
    let pause = Duration::from_millis(duration / steps);
    for step in 1..=steps {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = ctx.cancelled() => return Ok(CallToolResult::error("cancelled")),
        }
        let message = format!("step {step} of {steps}");
        let _ = ctx
            .progress(step as f64, Some(steps as f64), Some(message))
            .await;
        if a.close_stream_after == Some(step) {
            // Best effort: a failure leaves the connection open, which is
            // also a valid stream.
            let _ = ctx.close_sse_stream().await;
        }
    }
    Ok(CallToolResult::text(format!(
        "Long running operation completed: {steps} steps in {duration} ms"
    )))
}

async fn elicit(ctx: &RequestContext, message: String, requested_schema: Value) -> ToolResult {
    Ok(
        match ctx
            .elicit(ElicitParams {
                message,
                requested_schema,
            })
            .await
        {
            Ok(r) => CallToolResult::text(format!(
                "User response: action={}, content={}",
                r.action,
                Value::Object(r.content.unwrap_or_default())
            )),
            Err(err) => CallToolResult::error(format!("elicitation failed: {err}")),
        },
    )
}

fn as_object<T: Serialize>(value: &T) -> serde_json::Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    }
}

fn resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef::text(
            "test://static-text",
            "Static text",
            "text/plain",
            "This is the content of the static text resource.",
        )
        .description("A static text resource for testing")
        .icon(crate::revision_fixtures::icon()),
        ResourceDef::new(
            "test://static-binary",
            "Static binary",
            |uri, _| async move { Ok(vec![ResourceContents::blob(uri, "image/png", PNG_BASE64)]) },
        )
        .mime_type("image/png")
        .description("A static binary resource (PNG) for testing"),
        ResourceDef::text(
            "test://watched-resource",
            "Watched resource",
            "text/plain",
            "Watched resource content",
        )
        .description("A resource to subscribe to; the touch_resource tool marks it updated"),
    ]
}

fn templates() -> Vec<TemplateDef> {
    // expect: the template literal below is level-1 RFC 6570.
    #[allow(clippy::expect_used)]
    let data = TemplateDef::new(
        "test://template/{id}/data",
        "Templated data",
        |uri, vars, _| async move {
            let id = vars.get("id").cloned().unwrap_or_default();
            let body =
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
            Ok(vec![ResourceContents::text(
                uri,
                "application/json",
                body.to_string(),
            )])
        },
    )
    .expect("valid template")
    .mime_type("application/json")
    .description("A resource template with an id parameter")
    .completer(|_, value| {
        (1..=5)
            .map(|i| format!("{i}"))
            .filter(|v| v.starts_with(value))
            .collect()
    });
    vec![data]
}

fn prompts() -> Vec<PromptDef> {
    vec![
        PromptDef::new(
            "test_simple_prompt",
            "A simple prompt without arguments",
            |_, _| async {
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(Content::text(
                        "This is a simple prompt for testing.",
                    ))],
                })
            },
        )
        .icon(crate::revision_fixtures::icon()),
        PromptDef::new(
            "test_prompt_with_arguments",
            "A prompt with two required arguments",
            |args, _| async move {
                let arg = |k: &str| {
                    args.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(Content::text(format!(
                        "Prompt with arguments: arg1='{}', arg2='{}'",
                        arg("arg1"),
                        arg("arg2")
                    )))],
                })
            },
        )
        .argument("arg1", "First test argument", true)
        .argument("arg2", "Second test argument", true)
        .completer(|_, value| {
            ["test-value", "test-value-2", "other-value"]
                .iter()
                .filter(|v| v.starts_with(value))
                .map(|v| (*v).to_owned())
                .collect()
        }),
        PromptDef::new(
            "test_prompt_with_embedded_resource",
            "A prompt embedding a resource",
            |args, _| async move {
                let uri = args
                    .get("resourceUri")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![
                        PromptMessage::user(Content::resource(ResourceContents::text(
                            uri,
                            "text/plain",
                            "Embedded resource content for testing.",
                        ))),
                        PromptMessage::user(Content::text(
                            "Please process the embedded resource above.",
                        )),
                    ],
                })
            },
        )
        .argument("resourceUri", "URI of the resource to embed", true),
        PromptDef::new(
            "test_prompt_with_image",
            "A prompt with an image",
            |_, _| async {
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![
                        PromptMessage::user(Content::image(PNG_BASE64, "image/png")),
                        PromptMessage::user(Content::text("Please analyze the image above.")),
                    ],
                })
            },
        ),
    ]
}

#[allow(dead_code)]
fn schema_sample() -> Value {
    schema_of::<EchoArgs>()
}
