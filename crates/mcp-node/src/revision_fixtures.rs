//! Built-in tools for what the 2025-11-25 revision added to server-to-client
//! requests: `ping` from the server, URL-mode elicitation (and the -32042
//! error that asks for one), and sampling with tools. Like the other
//! fixtures they are ordinary provider code, so each runs in every era and
//! on every transport that has the feature: a session's question travels on
//! the call's stream, a 2026-07-28 one in an `input_required` result.

use std::sync::atomic::{AtomicU64, Ordering};

use mcp_cluster::{RequestContext, ToolDef};
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{
    CallToolResult, CreateMessageParams, ElicitUrlParams, Icon, SamplingMessage, Tool, ToolChoice,
};
use serde_json::{Value, json};

use crate::builtins::no_args;

/// A 16x16 SVG disc: the icon of the `add` tool, the `test://static-text`
/// resource and the `test_simple_prompt` prompt. The server itself has
/// none: the 2026-07-28 era repeats `serverInfo` in every result's `_meta`.
pub(crate) fn icon() -> Icon {
    const SVG_BASE64: &str = "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHZpZXdCb3g9IjAgMCAxNiAxNiI+PGNpcmNsZSBjeD0iOCIgY3k9IjgiIHI9IjciIGZpbGw9IiMyYjZjYjAiLz48L3N2Zz4=";
    Icon::new(
        format!("data:image/svg+xml;base64,{SVG_BASE64}"),
        "image/svg+xml",
    )
    .sizes(["any"])
}

/// Where the URL-mode fixtures send the user. The node never opens it: the
/// client shows it to the user, who would sign in there.
const SIGN_IN_URL: &str = "https://auth.example.com/connect";

/// Numbers the URL-mode elicitations of this node, so that each has an ID
/// of its own.
static ELICITATIONS: AtomicU64 = AtomicU64::new(0);

fn url_elicitation() -> ElicitUrlParams {
    let n = ELICITATIONS.fetch_add(1, Ordering::Relaxed) + 1;
    let id = format!("mcp-node-{n}");
    ElicitUrlParams::new(
        "Sign in to the example service to continue.",
        &id,
        format!("{SIGN_IN_URL}?elicitation={id}"),
    )
}

/// The tools.
pub(crate) fn tools() -> Vec<ToolDef> {
    vec![
        no_args(
            "test_ping_client",
            "Pings the client (server-to-client ping, session era) and says whether it answered.",
            |ctx| async move {
                Ok(match ctx.ping().await {
                    Ok(()) => CallToolResult::text("The client answered ping."),
                    Err(err) => CallToolResult::error(format!("ping failed: {err}")),
                })
            },
        ),
        no_args(
            "test_url_elicitation",
            "Sends the user to a URL (URL-mode elicitation), then says it completed (notifications/elicitation/complete).",
            |ctx| async move {
                let params = url_elicitation();
                let id = params.elicitation_id.clone();
                let answer = match ctx.elicit_url(params).await {
                    Ok(answer) => answer,
                    Err(err) => {
                        return Ok(CallToolResult::error(format!(
                            "URL elicitation failed: {err}"
                        )));
                    }
                };
                if answer.action != "accept" {
                    return Ok(CallToolResult::text(format!(
                        "The user chose {} for {id}.",
                        answer.action
                    )));
                }
                if let Err(err) = ctx.elicitation_complete(&id).await {
                    return Ok(CallToolResult::error(format!(
                        "could not say {id} completed: {err}"
                    )));
                }
                Ok(CallToolResult::text(format!(
                    "The user accepted {id}, which completed."
                )))
            },
        ),
        no_args(
            "test_url_elicitation_required",
            "Fails with -32042: the call needs a URL-mode elicitation first.",
            |_| async move {
                Err(ErrorObject::url_elicitation_required(
                    "Sign in to the example service first.",
                    &[url_elicitation()],
                ))
            },
        ),
        no_args(
            "test_sampling_with_tools",
            "Asks the client's model about the weather, offering it a get_weather tool (sampling with tools), and says what the model did.",
            sample_with_tools,
        ),
    ]
}

async fn sample_with_tools(ctx: RequestContext) -> Result<CallToolResult, ErrorObject> {
    let weather = Tool {
        name: "get_weather".to_owned(),
        title: None,
        description: "The weather in a city.".to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }),
        output_schema: None,
        annotations: None,
        icons: None,
        execution: None,
    };
    let mut params = CreateMessageParams::new(
        vec![SamplingMessage {
            role: "user".into(),
            content: json!({"type": "text", "text": "What is the weather in Paris?"}),
        }],
        100,
    );
    params.tools = Some(vec![weather]);
    params.tool_choice = Some(ToolChoice {
        mode: Some("auto".to_owned()),
    });
    let answer = match ctx.create_message(params).await {
        Ok(answer) => answer,
        Err(err) => return Ok(CallToolResult::error(format!("sampling failed: {err}"))),
    };
    // The content is one block or, with tools, possibly several.
    let blocks = match answer.content {
        Value::Array(blocks) => blocks,
        block => vec![block],
    };
    let said = blocks
        .iter()
        .find_map(|block| match block["type"].as_str() {
            Some("tool_use") => Some(format!(
                "The model called {} with {}",
                block["name"].as_str().unwrap_or_default(),
                block["input"]
            )),
            Some("text") => Some(format!(
                "The model said: {}",
                block["text"].as_str().unwrap_or_default()
            )),
            _ => None,
        });
    Ok(match said {
        Some(text) => CallToolResult::text(text),
        None => CallToolResult::error("the model's answer has neither text nor a tool call"),
    })
}
