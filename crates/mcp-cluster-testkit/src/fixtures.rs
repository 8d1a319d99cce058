//! A server with tools made for tests: each one exercises one runtime path
//! (slow work with progress, panics, hangs, asking the client, closing the
//! stream, logging).

use std::time::Duration;

use mcp_cluster::protocol::ErrorObject;
use mcp_cluster::protocol::types::{
    CallToolResult, Content, CreateMessageParams, ElicitParams, GetPromptResult, LoggingLevel,
    PromptMessage, SamplingMessage,
};
use mcp_cluster::{McpServer, PromptDef, ResourceDef, ServerBuilder, ToolDef};
use serde_json::{Value, json};

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn arg_u64(args: &serde_json::Map<String, Value>, key: &str, default: u64) -> u64 {
    args.get(key).and_then(Value::as_u64).unwrap_or(default)
}

/// The test server:
/// - `echo {message}`: text `message`.
/// - `slow {steps, step_ms}`: `steps` progress notifications (1..=steps),
///   one every `step_ms`; stops on cancellation.
/// - `panic`: the handler panics.
/// - `hang`: never completes (for timeouts and cancellation).
/// - `sample {prompt}`: asks the client `sampling/createMessage`, returns
///   its text.
/// - `elicit`: asks the client `elicitation/create`, returns the action.
/// - `roots`: asks the client `roots/list`.
/// - `log {count}`: `count` info log messages, then text.
/// - `drop_stream {after_ms}`: closes its SSE stream (polling), answers
///   `after_ms` later.
/// - `typed_add {a, b}` with an output schema; `bad_output` declares one
///   and breaks it; `unstructured_output` declares one and returns text
///   only.
/// - `mirrored {region, query}`: `region` is mirrored to `Mcp-Param-Region`.
/// - resource `test://r` (text), prompt `greet {name}`.
pub fn test_server() -> McpServer {
    let tools = vec![
        ToolDef::new(
            "echo",
            "Echoes message.",
            schema(json!({"message": {"type": "string"}}), &["message"]),
            |args, _| async move {
                Ok(CallToolResult::text(
                    args.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                ))
            },
        ),
        ToolDef::new(
            "slow",
            "Progress every step_ms, steps times.",
            schema(
                json!({"steps": {"type": "integer", "minimum": 1}, "step_ms": {"type": "integer", "minimum": 0}}),
                &[],
            ),
            |args, ctx| async move {
                let steps = arg_u64(&args, "steps", 5);
                let step = Duration::from_millis(arg_u64(&args, "step_ms", 50));
                for i in 1..=steps {
                    tokio::time::sleep(step).await;
                    let _ = ctx.progress(i as f64, Some(steps as f64), None).await;
                }
                Ok(CallToolResult::text(format!("done {steps}")))
            },
        ),
        ToolDef::new(
            "panic",
            "Panics.",
            schema(json!({}), &[]),
            |_, _| async move {
                #[allow(clippy::panic)]
                if true {
                    panic!("fixture panic");
                }
                Ok(CallToolResult::text("unreachable"))
            },
        ),
        ToolDef::new(
            "hang",
            "Never completes.",
            schema(json!({}), &[]),
            |_, _| async move {
                std::future::pending::<()>().await;
                Ok(CallToolResult::text("unreachable"))
            },
        ),
        ToolDef::new(
            "sample",
            "Asks the client's model.",
            schema(json!({"prompt": {"type": "string"}}), &["prompt"]),
            |args, ctx| async move {
                let prompt = args
                    .get("prompt")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let params = CreateMessageParams::new(
                    vec![SamplingMessage {
                        role: "user".into(),
                        content: json!({"type": "text", "text": prompt}),
                    }],
                    10,
                );
                Ok(match ctx.create_message(params).await {
                    Ok(r) => CallToolResult::text(
                        r.content
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                    ),
                    Err(err) => CallToolResult::error(err.to_string()),
                })
            },
        ),
        ToolDef::new(
            "elicit",
            "Asks the user.",
            schema(json!({}), &[]),
            |_, ctx| async move {
                let params = ElicitParams {
                    message: "name?".into(),
                    requested_schema: json!({"type": "object", "properties": {"name": {"type": "string"}}}),
                };
                Ok(match ctx.elicit(params).await {
                    Ok(r) => CallToolResult::text(r.action),
                    Err(err) => CallToolResult::error(err.to_string()),
                })
            },
        ),
        ToolDef::new(
            "roots",
            "Asks the client's roots.",
            schema(json!({}), &[]),
            |_, ctx| async move {
                Ok(match ctx.list_roots().await {
                    Ok(r) => {
                        CallToolResult::text(serde_json::to_string(&r.roots).unwrap_or_default())
                    }
                    Err(err) => CallToolResult::error(err.to_string()),
                })
            },
        ),
        ToolDef::new(
            "log",
            "Logs count messages, each padded to at least bytes.",
            schema(
                json!({"count": {"type": "integer"}, "bytes": {"type": "integer"}}),
                &[],
            ),
            |args, ctx| async move {
                let bytes = usize::try_from(arg_u64(&args, "bytes", 0)).unwrap_or(0);
                for i in 0..arg_u64(&args, "count", 3) {
                    let mut message = format!("message {i}");
                    if message.len() < bytes {
                        message.push(' ');
                        message.push_str(&"x".repeat(bytes - message.len()));
                    }
                    let _ = ctx
                        .log(LoggingLevel::Info, Some("test"), json!(message))
                        .await;
                }
                Ok(CallToolResult::text("logged"))
            },
        ),
        ToolDef::new(
            "drop_stream",
            "Closes its stream, answers later.",
            schema(json!({"after_ms": {"type": "integer"}}), &[]),
            |args, ctx| async move {
                let _ = ctx.progress(1.0, None, None).await;
                let _ = ctx.close_sse_stream().await;
                tokio::time::sleep(Duration::from_millis(arg_u64(&args, "after_ms", 100))).await;
                let _ = ctx.progress(2.0, None, None).await;
                Ok(CallToolResult::text("after reconnect"))
            },
        ),
        ToolDef::new(
            "mirrored",
            "Region mirrored to a header.",
            schema(
                json!({"region": {"type": "string", "x-mcp-header": "Region"}, "query": {"type": "string"}}),
                &["query"],
            ),
            |args, _| async move { Ok(CallToolResult::text(Value::Object(args).to_string())) },
        ),
    ];
    let mut builder = ServerBuilder::new("test-server", "0.0.0").page_size(5);
    for tool in tools {
        // expect: the fixture schemas above are valid.
        #[allow(clippy::expect_used)]
        let tool = tool.expect("fixture schema");
        builder = builder.tool(tool);
    }
    builder
        .tool(
            ToolDef::new(
                "typed_add",
                "a + b, structured.",
                schema(
                    json!({"a": {"type": "number"}, "b": {"type": "number"}}),
                    &["a", "b"],
                ),
                |args, _| async move {
                    let sum = args.get("a").and_then(Value::as_f64).unwrap_or(0.0)
                        + args.get("b").and_then(Value::as_f64).unwrap_or(0.0);
                    let mut out = serde_json::Map::new();
                    out.insert("sum".into(), json!(sum));
                    Ok(CallToolResult::structured(out))
                },
            )
            .and_then(|t| t.output_schema(schema(json!({"sum": {"type": "number"}}), &["sum"])))
            .map_err(|e| ErrorObject::internal(e.to_string()))
            .unwrap_or_else(|e| unreachable_tool(&e)),
        )
        .tool(
            ToolDef::new(
                "bad_output",
                "Breaks its output schema.",
                schema(json!({}), &[]),
                |_, _| async move {
                    let mut out = serde_json::Map::new();
                    out.insert("sum".into(), json!("not a number"));
                    Ok(CallToolResult::structured(out))
                },
            )
            .and_then(|t| t.output_schema(schema(json!({"sum": {"type": "number"}}), &["sum"])))
            .map_err(|e| ErrorObject::internal(e.to_string()))
            .unwrap_or_else(|e| unreachable_tool(&e)),
        )
        .tool(
            ToolDef::new(
                "unstructured_output",
                "Declares an output schema, returns text only.",
                schema(json!({}), &[]),
                |_, _| async move { Ok(CallToolResult::text("{\"sum\": 3}")) },
            )
            .and_then(|t| t.output_schema(schema(json!({"sum": {"type": "number"}}), &["sum"])))
            .map_err(|e| ErrorObject::internal(e.to_string()))
            .unwrap_or_else(|e| unreachable_tool(&e)),
        )
        .resource(ResourceDef::text(
            "test://r",
            "r",
            "text/plain",
            "resource text",
        ))
        .prompt(
            PromptDef::new("greet", "Greets.", |args, _| async move {
                let name = args
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(Content::text(format!("Hello {name}")))],
                })
            })
            .argument("name", "who", true),
        )
        .build()
}

#[allow(clippy::panic)]
fn unreachable_tool(err: &ErrorObject) -> ToolDef {
    panic!("fixture tool failed to build: {err}")
}
