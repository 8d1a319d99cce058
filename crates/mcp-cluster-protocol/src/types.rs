//! Typed params and results of MCP methods (2024-11-05 through 2025-11-25).
//!
//! Fields added by later revisions are optional, so one type serves every
//! revision; unknown fields from clients are ignored. Result shapes follow the
//! specification's optional fields: `structuredContent` is present only on
//! tool results that carry structured data, tool `content` is never empty,
//! and `nextCursor` is present only when more results exist (pagination:
//! clients follow any cursor that is present).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object.
pub type JsonObject = Map<String, Value>;

/// Name and version of a client or server implementation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Implementation {
    /// Programmatic name.
    pub name: String,
    /// Version string.
    pub version: String,
    /// Display name (2025-06-18 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Icons a client may show for it (2025-11-25 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
    /// Its website (2025-11-25 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub website_url: Option<String>,
}

/// An icon for a server, tool, resource or prompt (2025-11-25 and later).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Icon {
    /// An `https:` URL or a `data:` URI of the image.
    pub src: String,
    /// Its MIME type, when `src` does not say it (`image/png`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The sizes it fits, `WxH` (`48x48`) or `any`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<Vec<String>>,
    /// The background it is drawn for: `light` or `dark`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
}

impl Icon {
    /// An icon at `src` of MIME type `mime_type`.
    pub fn new(src: impl Into<String>, mime_type: &str) -> Self {
        Self {
            src: src.into(),
            mime_type: Some(mime_type.to_owned()),
            sizes: None,
            theme: None,
        }
    }

    /// The sizes it fits (`48x48`, `any`).
    #[must_use]
    pub fn sizes<S: Into<String>>(mut self, sizes: impl IntoIterator<Item = S>) -> Self {
        self.sizes = Some(sizes.into_iter().map(Into::into).collect());
        self
    }
}

/// `initialize` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The revision the client asks for.
    pub protocol_version: String,
    /// What the client can do.
    #[serde(default)]
    pub capabilities: ClientCapabilities,
    /// Who the client is.
    #[serde(default)]
    pub client_info: Implementation,
}

/// What a client can do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    /// `roots` (with `listChanged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<Value>,
    /// `sampling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Value>,
    /// `elicitation` (2025-06-18 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<Value>,
    /// `experimental`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<Value>,
    /// Anything else the client declared, kept as sent.
    #[serde(flatten)]
    pub other: JsonObject,
}

impl ClientCapabilities {
    /// `elicitation.url`: the client takes URL-mode elicitations.
    pub fn elicits_by_url(&self) -> bool {
        self.elicitation
            .as_ref()
            .and_then(|e| e.get("url"))
            .is_some()
    }

    /// `sampling.tools`: the client's model may be offered tools.
    pub fn samples_with_tools(&self) -> bool {
        self.sampling
            .as_ref()
            .and_then(|s| s.get("tools"))
            .is_some()
    }
}

/// `listChanged` sub-capability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ListChanged {
    /// The server sends `notifications/*/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
}

/// `resources` capability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesCapability {
    /// `resources/subscribe` is supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscribe: Option<bool>,
    /// The server sends `notifications/resources/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
}

/// What the server can do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServerCapabilities {
    /// Tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ListChanged>,
    /// Resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourcesCapability>,
    /// Prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<ListChanged>,
    /// Log messages (`logging/setLevel`, `notifications/message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<JsonObject>,
    /// `completion/complete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<JsonObject>,
    /// Experimental features.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<JsonObject>,
    /// Extensions by identifier (`io.modelcontextprotocol/skills`), each
    /// with its settings object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
    /// Task-augmented requests (2025-11-25): `{list?, cancel?, requests?:
    /// {tools?: {call?}}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<JsonObject>,
}

/// `initialize` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The negotiated revision.
    pub protocol_version: String,
    /// What the server can do.
    pub capabilities: ServerCapabilities,
    /// Who the server is.
    pub server_info: Implementation,
    /// Usage hints for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// Params of paginated list methods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct PaginatedParams {
    /// The cursor from the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Behaviour hints of a tool (2025-03-26 and later).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// May perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Repeated calls with the same arguments have no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// Interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// A tool as `tools/list` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// Unique name (1-128 of `[A-Za-z0-9_.-]`).
    pub name: String,
    /// Display name (2025-06-18 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it does; absent reads as `""`.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object, sent verbatim.
    pub input_schema: Value,
    /// JSON Schema of `structuredContent` (2025-06-18 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Icons a client may show for it (2025-11-25 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
    /// How it may run (2025-11-25 only: task-augmented calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<ToolExecution>,
}

/// Whether a tool runs as a task: in a 2025-11-25 session, when the call
/// is task-augmented (`params.task`); in 2026-07-28, when the request's
/// client declares the tasks extension. In configuration files and on the
/// wire (`execution.taskSupport`), `"forbidden"`, `"optional"` or
/// `"required"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskSupport {
    /// Never: always answered synchronously.
    #[default]
    Forbidden,
    /// As a task when the client asks for one, synchronously otherwise.
    Optional,
    /// Only as a task: a call that is not one is refused (2025-11-25:
    /// -32601; 2026-07-28: -32021).
    Required,
}

/// `Tool.execution` (2025-11-25).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolExecution {
    /// Whether it may be called as a task; absent reads as forbidden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<TaskSupport>,
}

/// `tools/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    /// One page of tools.
    pub tools: Vec<Tool>,
    /// Cursor of the next page; absent on the last page (pagination: present
    /// only if more results exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `tools/call` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolParams {
    /// The tool.
    pub name: String,
    /// The arguments; absent reads as `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<JsonObject>,
}

impl CallToolParams {
    /// Reads a `tools/call` request's params, moving the name and arguments
    /// out of the map instead of rebuilding them (what
    /// [`crate::Request::into_params`] does for any type).
    ///
    /// # Errors
    /// `-32602` naming the field that does not fit, as `into_params` would.
    pub fn from_request(request: crate::Request) -> Result<Self, crate::ErrorObject> {
        let fits = request.params.as_ref().is_some_and(|p| {
            matches!(p.get("name"), Some(Value::String(_)))
                && matches!(
                    p.get("arguments"),
                    None | Some(Value::Null | Value::Object(_))
                )
        });
        if !fits {
            return request.into_params();
        }
        let mut params = request.params.unwrap_or_default();
        let Some(Value::String(name)) = params.remove("name") else {
            return Err(crate::ErrorObject::invalid_params("name must be a string"));
        };
        let arguments = match params.remove("arguments") {
            Some(Value::Object(arguments)) => Some(arguments),
            _ => None,
        };
        Ok(Self { name, arguments })
    }
}

/// Audience and priority hints on content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// `user` and/or `assistant`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<String>>,
    /// 0 (least) to 1 (most important).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    /// ISO 8601 time of last modification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

/// Contents of a resource: text or base64 blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ResourceContents {
    /// UTF-8 text.
    Text {
        /// The resource URI.
        uri: String,
        /// Its MIME type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// The text.
        text: String,
    },
    /// Binary, base64-encoded.
    Blob {
        /// The resource URI.
        uri: String,
        /// Its MIME type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Base64 data.
        blob: String,
    },
}

impl ResourceContents {
    /// Text contents.
    pub fn text(uri: impl Into<String>, mime_type: &str, text: impl Into<String>) -> Self {
        Self::Text {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            text: text.into(),
        }
    }

    /// Blob contents, already base64.
    pub fn blob(uri: impl Into<String>, mime_type: &str, base64: impl Into<String>) -> Self {
        Self::Blob {
            uri: uri.into(),
            mime_type: Some(mime_type.into()),
            blob: base64.into(),
        }
    }
}

/// One item of tool or prompt content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Annotations>,
    },
    /// An image, base64.
    Image {
        /// Base64 data.
        data: String,
        /// MIME type, e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Annotations>,
    },
    /// Audio, base64 (2025-03-26 and later).
    Audio {
        /// Base64 data.
        data: String,
        /// MIME type, e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Annotations>,
    },
    /// A link to a resource (2025-06-18 and later).
    ResourceLink {
        /// The URI.
        uri: String,
        /// Its name.
        name: String,
        /// What it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// MIME type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// An embedded resource.
    Resource {
        /// The contents.
        resource: ResourceContents,
        /// Hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Annotations>,
    },
}

impl Content {
    /// Text content.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text {
            text: text.into(),
            annotations: None,
        }
    }

    /// Image content from base64 data.
    pub fn image(base64: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Image {
            data: base64.into(),
            mime_type: mime_type.into(),
            annotations: None,
        }
    }

    /// Audio content from base64 data.
    pub fn audio(base64: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Audio {
            data: base64.into(),
            mime_type: mime_type.into(),
            annotations: None,
        }
    }

    /// An embedded resource.
    pub fn resource(resource: ResourceContents) -> Self {
        Self::Resource {
            resource,
            annotations: None,
        }
    }
}

/// `tools/call` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// Unstructured content; never empty.
    pub content: Vec<Content>,
    /// Structured content, only when the tool returns structured data (a
    /// tool with an output schema always does). Absent otherwise, in every
    /// revision: clients that prefer `structuredContent` when present would
    /// otherwise read an empty object instead of `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<JsonObject>,
    /// The tool ran and failed; absent reads as `false`.
    #[serde(default)]
    pub is_error: bool,
}

impl CallToolResult {
    /// A successful result with content.
    pub fn success(content: Vec<Content>) -> Self {
        Self {
            content,
            structured_content: None,
            is_error: false,
        }
    }

    /// A successful result with one text item.
    pub fn text(text: impl Into<String>) -> Self {
        Self::success(vec![Content::text(text)])
    }

    /// A tool execution error: the tool ran and failed; the model sees why.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(text)],
            structured_content: None,
            is_error: true,
        }
    }

    /// A result with structured content, also serialized as text for clients
    /// that read only `content` (2025-06-18 tools, structured content).
    pub fn structured(value: JsonObject) -> Self {
        let text = Value::Object(value.clone()).to_string();
        Self {
            content: vec![Content::text(text)],
            structured_content: Some(value),
            is_error: false,
        }
    }

    /// Applies the result-shape rules: `content` is never empty (the
    /// structured content as text when there is some, else one empty text
    /// item).
    #[must_use]
    pub fn normalized(mut self) -> Self {
        if self.content.is_empty() {
            let text = match &self.structured_content {
                Some(structured) => Value::Object(structured.clone()).to_string(),
                None => String::new(),
            };
            self.content.push(Content::text(text));
        }
        self
    }
}

/// A resource as `resources/list` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// The URI.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// Display name (2025-06-18 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Icons a client may show for it (2025-11-25 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
}

/// A resource template (RFC 6570).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplate {
    /// The URI template, e.g. `test://template/{id}/data`.
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it yields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type of what it yields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Icons a client may show for it (2025-11-25 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
}

/// `resources/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourcesResult {
    /// One page.
    pub resources: Vec<Resource>,
    /// Cursor of the next page; absent on the last page (pagination: present
    /// only if more results exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `resources/templates/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourceTemplatesResult {
    /// One page.
    pub resource_templates: Vec<ResourceTemplate>,
    /// Cursor of the next page; absent on the last page (pagination: present
    /// only if more results exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Params naming one resource (`resources/read`, `subscribe`, `unsubscribe`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UriParams {
    /// The URI.
    pub uri: String,
}

/// `resources/read` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadResourceResult {
    /// The contents (a template or directory may yield several).
    pub contents: Vec<ResourceContents>,
}

/// An argument a prompt takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Must be given.
    #[serde(default)]
    pub required: bool,
}

/// A prompt as `prompts/list` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// Its name.
    pub name: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is for; absent reads as `""`.
    #[serde(default)]
    pub description: String,
    /// Its arguments.
    #[serde(default)]
    pub arguments: Vec<PromptArgument>,
    /// Icons a client may show for it (2025-11-25 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Icon>>,
}

/// `prompts/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPromptsResult {
    /// One page.
    pub prompts: Vec<Prompt>,
    /// Cursor of the next page; absent on the last page (pagination: present
    /// only if more results exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `prompts/get` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GetPromptParams {
    /// The prompt.
    pub name: String,
    /// String arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// The content.
    pub content: Content,
}

impl PromptMessage {
    /// A user message.
    pub fn user(content: Content) -> Self {
        Self {
            role: "user".into(),
            content,
        }
    }

    /// An assistant message.
    pub fn assistant(content: Content) -> Self {
        Self {
            role: "assistant".into(),
            content,
        }
    }
}

/// `prompts/get` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GetPromptResult {
    /// What this rendering is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages.
    pub messages: Vec<PromptMessage>,
}

/// What `completion/complete` completes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum CompletionReference {
    /// An argument of a prompt.
    #[serde(rename = "ref/prompt")]
    Prompt {
        /// The prompt name.
        name: String,
    },
    /// A variable of a resource template.
    #[serde(rename = "ref/resource")]
    Resource {
        /// The template URI.
        uri: String,
    },
}

/// The argument being completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionArgument {
    /// Its name.
    pub name: String,
    /// What the user typed so far.
    pub value: String,
}

/// `completion/complete` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompleteParams {
    /// What is completed.
    #[serde(rename = "ref")]
    pub reference: CompletionReference,
    /// The argument.
    pub argument: CompletionArgument,
    /// Already-resolved arguments (2025-06-18 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
}

/// Completion values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Completion {
    /// At most 100 values.
    pub values: Vec<String>,
    /// How many matched in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// More values exist than returned; absent reads as `false`.
    #[serde(default)]
    pub has_more: bool,
}

/// `completion/complete` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteResult {
    /// The values.
    pub completion: Completion,
}

/// Log severity (RFC 5424 names), ordered from least to most severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggingLevel {
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Notice.
    Notice,
    /// Warning.
    Warning,
    /// Error.
    Error,
    /// Critical.
    Critical,
    /// Alert.
    Alert,
    /// Emergency.
    Emergency,
}

impl LoggingLevel {
    /// Every level, least severe first.
    pub const ALL: [Self; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Notice => "notice",
            Self::Warning => "warning",
            Self::Error => "error",
            Self::Critical => "critical",
            Self::Alert => "alert",
            Self::Emergency => "emergency",
        }
    }

    /// The level from its wire name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

/// `logging/setLevel` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetLevelParams {
    /// The minimum level to send.
    pub level: LoggingLevel,
}

/// `notifications/message` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoggingMessageParams {
    /// Severity.
    pub level: LoggingLevel,
    /// Logger name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logger: Option<String>,
    /// Any JSON.
    pub data: Value,
}

/// `notifications/progress` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressParams {
    /// The token from the request's `_meta`.
    pub progress_token: Value,
    /// Progress so far; increases with every notification.
    pub progress: f64,
    /// Total, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What is happening (2025-03-26 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `notifications/cancelled` params (`$/cancelRequest` sends `id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledParams {
    /// The request to cancel.
    #[serde(alias = "id")]
    pub request_id: Value,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A root the client exposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `roots/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListRootsResult {
    /// The roots.
    pub roots: Vec<Root>,
}

/// A message in a sampling request or result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// The content.
    pub content: Value,
}

/// `sampling/createMessage` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageParams {
    /// The conversation.
    pub messages: Vec<SamplingMessage>,
    /// Token budget.
    pub max_tokens: u32,
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Model preferences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_preferences: Option<Value>,
    /// Context the client may add: `none`, `thisServer`, `allServers`
    /// (the last two soft-deprecated in 2025-11-25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_context: Option<String>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Where generation stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// Provider-specific metadata, passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsonObject>,
    /// Tools the model may call (2025-11-25 and later; the client must have
    /// declared `sampling.tools`). The answer's content then may hold
    /// `tool_use` blocks, answered with `tool_result` blocks in the next
    /// request's messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    /// How the model uses `tools`: `{"mode": "auto" | "required" | "none"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

impl CreateMessageParams {
    /// A request for at most `max_tokens` tokens answering `messages`.
    pub fn new(messages: Vec<SamplingMessage>, max_tokens: u32) -> Self {
        Self {
            messages,
            max_tokens,
            system_prompt: None,
            model_preferences: None,
            include_context: None,
            temperature: None,
            stop_sequences: None,
            metadata: None,
            tools: None,
            tool_choice: None,
        }
    }

    /// Whether the request offers the model tools (needs `sampling.tools`).
    pub fn uses_tools(&self) -> bool {
        self.tools.is_some() || self.tool_choice.is_some()
    }
}

/// How a sampled model uses the tools it is offered (2025-11-25 and later).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ToolChoice {
    /// `auto` (the default), `required` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `sampling/createMessage` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateMessageResult {
    /// Usually `assistant`.
    pub role: String,
    /// The generated content.
    pub content: Value,
    /// The model used.
    #[serde(default)]
    pub model: String,
    /// Why generation stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

/// `elicitation/create` params (form mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitParams {
    /// What to ask the user.
    pub message: String,
    /// A flat object schema of primitive properties.
    pub requested_schema: Value,
}

/// `elicitation/create` params in URL mode (2025-11-25 and later; the
/// client must have declared `elicitation.url`): the user is sent to `url`
/// to do what must not pass through the client (sign in, pay, give a
/// secret); the answer says only whether they agreed to go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitUrlParams {
    /// Always `url`.
    pub mode: String,
    /// Why the user should go there.
    pub message: String,
    /// Unique within the server; `notifications/elicitation/complete`
    /// names it when the interaction at `url` has finished.
    pub elicitation_id: String,
    /// Where the user goes.
    pub url: String,
}

impl ElicitUrlParams {
    /// Asks the user to open `url` for the reason `message`.
    pub fn new(
        message: impl Into<String>,
        elicitation_id: impl Into<String>,
        url: impl Into<String>,
    ) -> Self {
        Self {
            mode: "url".to_owned(),
            message: message.into(),
            elicitation_id: elicitation_id.into(),
            url: url.into(),
        }
    }
}

/// `notifications/elicitation/complete` params.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationCompleteParams {
    /// The URL-mode elicitation that finished.
    pub elicitation_id: String,
}

/// `elicitation/create` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    /// `accept`, `decline` or `cancel`.
    pub action: String,
    /// The submitted values, for `accept`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<JsonObject>,
}

/// An empty result, `{}` (ping, setLevel, subscribe, unsubscribe).
pub fn empty_result() -> Value {
    Value::Object(JsonObject::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_params_read_in_place_match_the_generic_reading() {
        for params in [
            serde_json::json!({"name": "echo", "arguments": {"message": "m"}}),
            serde_json::json!({"name": "echo", "arguments": null, "other": 1}),
            serde_json::json!({"name": "echo"}),
            serde_json::json!({"name": 3}),
            serde_json::json!({"arguments": {}}),
            serde_json::json!({"name": "echo", "arguments": [1]}),
        ] {
            let request = crate::Request::new(crate::RequestId::Number(1), "tools/call", &params);
            let generic = request.clone().into_params::<CallToolParams>();
            assert_eq!(CallToolParams::from_request(request), generic, "{params}");
        }
        let none = crate::Request::new(crate::RequestId::Number(1), "tools/call", ());
        assert!(none.params.is_none());
        assert_eq!(
            CallToolParams::from_request(none.clone()),
            none.into_params::<CallToolParams>()
        );
    }

    #[test]
    fn tool_results_carry_content_and_structured_content_only_when_structured() {
        let r = CallToolResult::success(vec![]).normalized();
        let v = serde_json::to_value(&r).unwrap();
        assert!(v.get("structuredContent").is_none(), "{v}");
        assert_eq!(v["content"].as_array().unwrap().len(), 1);
        assert_eq!(v["isError"], false);

        let error = serde_json::to_value(CallToolResult::error("failed")).unwrap();
        assert!(error.get("structuredContent").is_none(), "{error}");

        let mut sum = JsonObject::new();
        sum.insert("sum".into(), serde_json::json!(3.0));
        let structured = CallToolResult {
            content: Vec::new(),
            ..CallToolResult::structured(sum)
        }
        .normalized();
        let v = serde_json::to_value(&structured).unwrap();
        assert_eq!(v["structuredContent"], serde_json::json!({"sum": 3.0}));
        assert_eq!(v["content"][0]["text"], r#"{"sum":3.0}"#);

        // An empty object is structured data too: a tool that returns it
        // (an output schema with no required property) sends it.
        let empty = serde_json::to_value(CallToolResult::structured(JsonObject::new())).unwrap();
        assert_eq!(empty["structuredContent"], serde_json::json!({}));
    }

    #[test]
    fn absent_optional_params_stay_absent() {
        // The schemas type these as objects: `null` would be invalid.
        let call: CallToolParams =
            serde_json::from_value(serde_json::json!({"name": "t"})).unwrap();
        assert_eq!(
            serde_json::to_value(call).unwrap(),
            serde_json::json!({"name": "t"})
        );
        let get: GetPromptParams =
            serde_json::from_value(serde_json::json!({"name": "p"})).unwrap();
        assert_eq!(
            serde_json::to_value(get).unwrap(),
            serde_json::json!({"name": "p"})
        );
        let complete = serde_json::json!({
            "ref": {"type": "ref/prompt", "name": "p"},
            "argument": {"name": "a", "value": "v"}
        });
        let parsed: CompleteParams = serde_json::from_value(complete.clone()).unwrap();
        assert_eq!(serde_json::to_value(parsed).unwrap(), complete);
    }

    #[test]
    fn cancel_alias_reads_id() {
        let p: CancelledParams = serde_json::from_value(serde_json::json!({"id": 3})).unwrap();
        assert_eq!(p.request_id, serde_json::json!(3));
    }

    #[test]
    fn logging_levels_are_ordered_by_severity() {
        assert!(LoggingLevel::Debug < LoggingLevel::Emergency);
        assert_eq!(LoggingLevel::parse("warning"), Some(LoggingLevel::Warning));
        assert_eq!(LoggingLevel::parse("warn"), None);
    }
}
