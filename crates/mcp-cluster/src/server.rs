//! [`McpServer`]: the provider's tools, resources and prompts behind the
//! runtime's [`McpService`] seam.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use mcp_cluster_protocol::types::{
    CallToolParams, CallToolResult, CompleteParams, CompleteResult, Completion,
    CompletionReference, GetPromptParams, Implementation, ListChanged, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedParams,
    ReadResourceResult, ResourcesCapability, ServerCapabilities, Tool, UriParams,
};
use mcp_cluster_protocol::{ErrorCode, ErrorObject, ProtocolVersion, Request, methods};
use mcp_cluster_runtime::{McpService, MirroredParam, RequestContext, ServerEvent, TaskSupport};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use crate::cursor;
use crate::prompt::PromptDef;
use crate::resource::{ResourceDef, TemplateDef};
use crate::skill::{self, SkillDef, Skills};
use crate::tool::ToolDef;

/// Items per page of every list method.
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// Most completion values returned (completion/complete: max 100).
const MAX_COMPLETIONS: usize = 100;

/// Capacity of the server-event channel; a lagging subscriber misses old
/// events (list changes are idempotent hints).
const EVENT_CHANNEL: usize = 256;

/// Everything the server offers, in registration order (the deterministic
/// order of every listing).
#[derive(Debug, Default, Clone)]
pub(crate) struct Catalog {
    pub(crate) tools: Vec<ToolDef>,
    tool_index: HashMap<String, usize>,
    resources: Vec<ResourceDef>,
    templates: Vec<TemplateDef>,
    prompts: Vec<PromptDef>,
    skills: Skills,
}

impl Catalog {
    fn reindex(&mut self) {
        self.tool_index = self
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.tool.name.clone(), i))
            .collect();
    }

    fn tool(&self, name: &str) -> Option<&ToolDef> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }
}

/// Builds an [`McpServer`].
#[derive(Debug)]
pub struct ServerBuilder {
    info: Implementation,
    instructions: Option<String>,
    pub(crate) catalog: Catalog,
    page_size: usize,
}

impl ServerBuilder {
    /// A server named `name` at `version`.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            info: Implementation {
                name: name.to_owned(),
                version: version.to_owned(),
                title: None,
                ..Default::default()
            },
            instructions: None,
            catalog: Catalog::default(),
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// The server's display name (`serverInfo.title`).
    #[must_use]
    pub fn title(mut self, title: &str) -> Self {
        self.info.title = Some(title.to_owned());
        self
    }

    /// Adds an icon clients may show for the server (`serverInfo.icons`,
    /// 2025-11-25 and later).
    #[must_use]
    pub fn icon(mut self, icon: mcp_cluster_protocol::types::Icon) -> Self {
        self.info.icons.get_or_insert_with(Vec::new).push(icon);
        self
    }

    /// The server's website (`serverInfo.websiteUrl`, 2025-11-25 and later).
    #[must_use]
    pub fn website_url(mut self, url: &str) -> Self {
        self.info.website_url = Some(url.to_owned());
        self
    }

    /// Usage hints sent in `initialize`.
    #[must_use]
    pub fn instructions(mut self, text: &str) -> Self {
        self.instructions = Some(text.to_owned());
        self
    }

    /// Items per page of list methods.
    #[must_use]
    pub fn page_size(mut self, size: usize) -> Self {
        self.page_size = size.max(1);
        self
    }

    /// Adds a tool (a later tool with the same name replaces it).
    #[must_use]
    pub fn tool(mut self, tool: ToolDef) -> Self {
        self.catalog.tools.retain(|t| t.tool.name != tool.tool.name);
        self.catalog.tools.push(tool);
        self
    }

    /// Adds a resource.
    #[must_use]
    pub fn resource(mut self, resource: ResourceDef) -> Self {
        self.catalog.resources.push(resource);
        self
    }

    /// Adds a resource template.
    #[must_use]
    pub fn template(mut self, template: TemplateDef) -> Self {
        self.catalog.templates.push(template);
        self
    }

    /// Adds a prompt.
    #[must_use]
    pub fn prompt(mut self, prompt: PromptDef) -> Self {
        self.catalog.prompts.push(prompt);
        self
    }

    /// Adds a skill (the Skills extension; one at the same path is
    /// replaced). With one or more, the server declares the extension and
    /// serves `skills/list`, `skills/get`, `resources/directory/read` and
    /// each skill's files as `skill://` resources.
    #[must_use]
    pub fn skill(mut self, skill: SkillDef) -> Self {
        self.catalog.skills.add(skill);
        self
    }

    /// The server.
    pub fn build(mut self) -> McpServer {
        self.catalog.reindex();
        let (events, _) = broadcast::channel(EVENT_CHANNEL);
        McpServer {
            inner: Arc::new(Inner {
                info: self.info,
                instructions: self.instructions,
                catalog: RwLock::new(Arc::new(self.catalog)),
                page_size: self.page_size,
                events,
            }),
        }
    }
}

/// An MCP server: what a provider offers, served by the runtime. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    info: Implementation,
    instructions: Option<String>,
    /// Replaced whole on change; readers keep the snapshot they took.
    catalog: RwLock<Arc<Catalog>>,
    page_size: usize,
    /// Server events for the node to fan out to sessions.
    events: broadcast::Sender<ServerEvent>,
}

impl McpServer {
    fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(
            &self
                .inner
                .catalog
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn update(&self, change: impl FnOnce(&mut Catalog), event: ServerEvent) {
        {
            let mut guard = self
                .inner
                .catalog
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut next = Catalog::clone(&guard);
            change(&mut next);
            next.reindex();
            *guard = Arc::new(next);
        }
        self.emit(event);
    }

    /// Server events (list changes, resource updates) for the node to fan
    /// out; [`crate::node`] subscribes.
    pub fn subscribe_events(&self) -> broadcast::Receiver<ServerEvent> {
        self.inner.events.subscribe()
    }

    fn emit(&self, event: ServerEvent) {
        // No subscriber (no node running yet) is fine.
        let _ = self.inner.events.send(event);
    }

    /// Adds or replaces a tool and tells clients (`list_changed`).
    pub fn add_tool(&self, tool: ToolDef) {
        self.update(
            |c| {
                c.tools.retain(|t| t.tool.name != tool.tool.name);
                c.tools.push(tool);
            },
            ServerEvent::ToolsListChanged,
        );
    }

    /// Removes a tool and tells clients; `false` when there was none.
    pub fn remove_tool(&self, name: &str) -> bool {
        let found = self.catalog().tool(name).is_some();
        if found {
            self.update(
                |c| c.tools.retain(|t| t.tool.name != name),
                ServerEvent::ToolsListChanged,
            );
        }
        found
    }

    /// Adds a resource and tells clients.
    pub fn add_resource(&self, resource: ResourceDef) {
        self.update(
            |c| c.resources.push(resource),
            ServerEvent::ResourcesListChanged,
        );
    }

    /// Each tool's name, title (when it has one) and description, in
    /// listing order: what a server card publishes of them.
    pub(crate) fn tool_summaries(&self) -> Vec<Value> {
        self.catalog()
            .tools
            .iter()
            .map(|t| {
                let mut tool =
                    serde_json::json!({"name": t.tool.name, "description": t.tool.description});
                if let Some(title) = &t.tool.title {
                    tool["title"] = title.clone().into();
                }
                tool
            })
            .collect()
    }

    /// Adds or replaces skills and tells clients (the resource list
    /// changed: each `SKILL.md` is in it). A server that had none declares
    /// the extension to sessions that start afterwards.
    pub fn add_skills(&self, skills: impl IntoIterator<Item = SkillDef>) {
        self.update(
            |c| {
                for skill in skills {
                    c.skills.add(skill);
                }
            },
            ServerEvent::ResourcesListChanged,
        );
    }

    /// Adds a prompt and tells clients.
    pub fn add_prompt(&self, prompt: PromptDef) {
        self.update(|c| c.prompts.push(prompt), ServerEvent::PromptsListChanged);
    }

    /// Tells listening clients that something changed that the catalog
    /// does not hold (a provider whose tools or prompts depend on outside
    /// state): `notifications/*/list_changed` or `resources/updated`.
    pub fn announce(&self, event: ServerEvent) {
        self.emit(event);
    }

    /// Tells subscribed clients that a resource changed
    /// (`notifications/resources/updated`).
    pub fn resource_updated(&self, uri: &str) {
        self.emit(ServerEvent::ResourceUpdated {
            uri: uri.to_owned(),
        });
    }

    async fn call_tool(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        let params = CallToolParams::from_request(request)?;
        let catalog = self.catalog();
        let tool = catalog
            .tool(&params.name)
            .ok_or_else(|| ErrorObject::invalid_params(format!("unknown tool: {}", params.name)))?;
        let args = params.arguments.unwrap_or_default();
        let args_value = Value::Object(args);
        let errors = tool.input_errors(&args_value);
        if !errors.is_empty() {
            let message = format!(
                "invalid arguments for tool {}: {}",
                params.name,
                errors.join("; ")
            );
            // 2025-11-25 (SEP-1303): input validation errors are tool
            // execution errors, so the model can correct itself.
            if ctx.protocol_version().input_errors_are_tool_errors() {
                return to_value(CallToolResult::error(message));
            }
            return Err(ErrorObject::invalid_params(message));
        }
        let Value::Object(args) = args_value else {
            unreachable!("constructed as an object above")
        };
        let result = tool.call(args, ctx).await?.normalized();
        // 2025-06-18 tools: a tool with an output schema MUST return
        // structured results that conform to it. A result without any is
        // the provider's bug, reported as such (-32603 and an error log
        // naming the tool), never sent as text-only or as an empty object.
        // A tool execution error (`isError`) needs no structured content.
        if tool.output.is_some() && !result.is_error {
            let Some(structured) = &result.structured_content else {
                tracing::error!(tool = %params.name, "Tool declares an outputSchema but returned no structuredContent.");
                return Err(ErrorObject::internal(
                    "tool output has no structuredContent although the tool declares an outputSchema",
                ));
            };
            let errors = tool.output_errors(&Value::Object(structured.clone()));
            if !errors.is_empty() {
                tracing::error!(tool = %params.name, errors = ?errors, "Tool output does not match its outputSchema.");
                return Err(ErrorObject::internal(
                    "tool output does not match its outputSchema",
                ));
            }
        }
        to_value(result)
    }

    async fn read_resource(
        &self,
        request: &Request,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let UriParams { uri } = request.parse_params()?;
        let catalog = self.catalog();
        let contents = if let Some(r) = catalog.resources.iter().find(|r| r.resource.uri == uri) {
            (r.read)(uri.clone(), ctx).await?
        } else if let Some((t, vars)) = catalog
            .templates
            .iter()
            .find_map(|t| t.matcher.matches(&uri).map(|v| (t, v)))
        {
            (t.read)(uri.clone(), vars, ctx).await?
        } else if let Some(contents) = catalog.skills.read(&uri) {
            vec![contents]
        } else {
            return Err(
                ErrorObject::new(ErrorCode::RESOURCE_NOT_FOUND, "resource not found")
                    .with_data(serde_json::json!({ "uri": uri })),
            );
        };
        to_value(ReadResourceResult { contents })
    }

    async fn get_prompt(
        &self,
        request: &Request,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let params: GetPromptParams = request.parse_params()?;
        let catalog = self.catalog();
        let prompt = catalog
            .prompts
            .iter()
            .find(|p| p.prompt.name == params.name)
            .ok_or_else(|| {
                ErrorObject::invalid_params(format!("unknown prompt: {}", params.name))
            })?;
        let args = params.arguments.unwrap_or_default();
        let missing = prompt.missing_arguments(&args);
        if !missing.is_empty() {
            return Err(ErrorObject::invalid_params(format!(
                "missing required arguments: {}",
                missing.join(", ")
            )));
        }
        to_value((prompt.get)(args, ctx).await?)
    }

    fn complete(&self, request: &Request) -> Result<Value, ErrorObject> {
        let params: CompleteParams = request.parse_params()?;
        let catalog = self.catalog();
        let completer = match &params.reference {
            CompletionReference::Prompt { name } => catalog
                .prompts
                .iter()
                .find(|p| &p.prompt.name == name)
                .ok_or_else(|| ErrorObject::invalid_params(format!("unknown prompt: {name}")))?
                .complete
                .clone(),
            CompletionReference::Resource { uri } => catalog
                .templates
                .iter()
                .find(|t| &t.template.uri_template == uri)
                .ok_or_else(|| {
                    ErrorObject::invalid_params(format!("unknown resource template: {uri}"))
                })?
                .complete
                .clone(),
        };
        let mut values = completer
            .map(|c| c(&params.argument.name, &params.argument.value))
            .unwrap_or_default();
        let total = values.len();
        values.truncate(MAX_COMPLETIONS);
        let completion = Completion {
            has_more: total > values.len(),
            total: Some(total as u64),
            values,
        };
        to_value(CompleteResult { completion })
    }

    fn list(&self, request: &Request, version: ProtocolVersion) -> Result<Value, ErrorObject> {
        let PaginatedParams { cursor } = request.parse_params()?;
        let cursor = cursor.as_deref();
        let size = self.inner.page_size;
        let catalog = self.catalog();
        match request.method.as_str() {
            methods::TOOLS_LIST => {
                // `execution` is 2025-11-25's alone (2026-07-28 has the tasks
                // extension, whose clients ask no tool).
                let tasks = version.has_session_tasks();
                let tools: Vec<_> = catalog
                    .tools
                    .iter()
                    .map(|t| Tool {
                        execution: t.tool.execution.clone().filter(|_| tasks),
                        ..t.tool.clone()
                    })
                    .collect();
                let (tools, next_cursor) = cursor::page(&tools, cursor, size)?;
                to_value(ListToolsResult { tools, next_cursor })
            }
            methods::RESOURCES_LIST => {
                // Each skill's SKILL.md after the provider's own.
                let all: Vec<_> = catalog
                    .resources
                    .iter()
                    .map(|r| r.resource.clone())
                    .chain(catalog.skills.all().iter().map(SkillDef::listed))
                    .collect();
                let (resources, next_cursor) = cursor::page(&all, cursor, size)?;
                to_value(ListResourcesResult {
                    resources,
                    next_cursor,
                })
            }
            methods::RESOURCES_TEMPLATES_LIST => {
                let all: Vec<_> = catalog
                    .templates
                    .iter()
                    .map(|t| t.template.clone())
                    .collect();
                let (resource_templates, next_cursor) = cursor::page(&all, cursor, size)?;
                to_value(ListResourceTemplatesResult {
                    resource_templates,
                    next_cursor,
                })
            }
            _ => {
                let all: Vec<_> = catalog.prompts.iter().map(|p| p.prompt.clone()).collect();
                let (prompts, next_cursor) = cursor::page(&all, cursor, size)?;
                to_value(ListPromptsResult {
                    prompts,
                    next_cursor,
                })
            }
        }
    }
}

impl McpServer {
    /// The Skills extension's methods; unknown methods to a server without
    /// skills (it does not declare the extension).
    fn skills(&self, request: &Request) -> Result<Value, ErrorObject> {
        let catalog = self.catalog();
        if catalog.skills.is_empty() {
            return Err(ErrorObject::method_not_found(&request.method));
        }
        let size = self.inner.page_size;
        match request.method.as_str() {
            methods::SKILLS_LIST => {
                let PaginatedParams { cursor } = request.parse_params()?;
                let (skills, next_cursor) =
                    cursor::page(catalog.skills.all(), cursor.as_deref(), size)?;
                let skills: Vec<Value> = skills.iter().map(SkillDef::entry).collect();
                let mut result = serde_json::json!({ "skills": skills });
                if let Some(next) = next_cursor {
                    result["nextCursor"] = next.into();
                }
                Ok(result)
            }
            methods::SKILLS_GET => {
                let UriParams { uri } = request.parse_params()?;
                Ok(serde_json::json!({ "skill": catalog.skills.get(&uri)?.entry() }))
            }
            _ => {
                #[derive(serde::Deserialize)]
                struct Params {
                    uri: String,
                    cursor: Option<String>,
                }
                let Params { uri, cursor } = request.parse_params()?;
                let children = catalog.skills.children(&uri)?;
                let (resources, next_cursor) = cursor::page(&children, cursor.as_deref(), size)?;
                to_value(ListResourcesResult {
                    resources,
                    next_cursor,
                })
            }
        }
    }
}

fn to_value(value: impl Serialize) -> Result<Value, ErrorObject> {
    serde_json::to_value(value)
        .map_err(|err| ErrorObject::internal(format!("result could not be encoded: {err}")))
}

#[async_trait]
impl McpService for McpServer {
    fn server_info(&self) -> Implementation {
        self.inner.info.clone()
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities {
            tools: Some(ListChanged {
                list_changed: Some(true),
            }),
            resources: Some(ResourcesCapability {
                subscribe: Some(true),
                list_changed: Some(true),
            }),
            prompts: Some(ListChanged {
                list_changed: Some(true),
            }),
            logging: Some(Map::new()),
            completions: Some(Map::new()),
            experimental: None,
            extensions: (!self.catalog().skills.is_empty()).then(|| {
                let mut extensions = Map::new();
                extensions.insert(
                    skill::EXTENSION.to_owned(),
                    serde_json::json!({"directoryRead": true}),
                );
                extensions
            }),
            // Declared by the runtime, in 2025-11-25 sessions (`runs_tasks`).
            tasks: None,
        }
    }

    fn instructions(&self) -> Option<String> {
        self.inner.instructions.clone()
    }

    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        match request.method.as_str() {
            methods::TOOLS_CALL => self.call_tool(request, ctx).await,
            methods::TOOLS_LIST
            | methods::RESOURCES_LIST
            | methods::RESOURCES_TEMPLATES_LIST
            | methods::PROMPTS_LIST => self.list(&request, ctx.protocol_version()),
            methods::RESOURCES_READ => self.read_resource(&request, ctx).await,
            methods::PROMPTS_GET => self.get_prompt(&request, ctx).await,
            methods::COMPLETION_COMPLETE => self.complete(&request),
            methods::SKILLS_LIST | methods::SKILLS_GET | methods::RESOURCES_DIRECTORY_READ => {
                self.skills(&request)
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    fn has_resource(&self, uri: &str) -> bool {
        let catalog = self.catalog();
        catalog.resources.iter().any(|r| r.resource.uri == uri)
            || catalog.skills.has_file(uri)
            || catalog
                .templates
                .iter()
                .any(|t| t.matcher.matches(uri).is_some())
    }

    fn has_tool(&self, name: &str) -> bool {
        self.catalog().tool(name).is_some()
    }

    fn tool_scopes(&self, name: &str) -> Vec<String> {
        self.catalog()
            .tool(name)
            .map(|t| t.scopes.clone())
            .unwrap_or_default()
    }

    fn has_prompt(&self, name: &str) -> bool {
        self.catalog().prompts.iter().any(|p| p.prompt.name == name)
    }

    fn task_support(&self, name: &str) -> TaskSupport {
        self.catalog()
            .tool(name)
            .map_or(TaskSupport::Forbidden, |t| t.task)
    }

    fn runs_tasks(&self) -> bool {
        self.catalog()
            .tools
            .iter()
            .any(|t| t.task != TaskSupport::Forbidden)
    }

    fn task_starts_in_handler(&self, name: &str) -> bool {
        self.catalog().tool(name).is_some_and(|t| t.task_in_handler)
    }

    fn mirrored_params(&self, tool: &str) -> Vec<MirroredParam> {
        self.catalog()
            .tool(tool)
            .map(|t| t.mirrored.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use mcp_cluster_protocol::types::Icon;
    use mcp_cluster_runtime::McpService;

    use super::ServerBuilder;

    #[test]
    fn icons_title_and_website_reach_the_server_info() {
        let icon = Icon::new("https://example.com/icon.png", "image/png").sizes(["48x48"]);
        let server = ServerBuilder::new("iconic", "1.0.0")
            .title("Iconic")
            .icon(icon.clone())
            .website_url("https://example.com")
            .build();
        let info = server.server_info();
        assert_eq!(info.title.as_deref(), Some("Iconic"));
        assert_eq!(info.icons, Some(vec![icon]));
        assert_eq!(info.website_url.as_deref(), Some("https://example.com"));
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(json["icons"][0]["sizes"][0], "48x48", "{json}");
        assert_eq!(json["websiteUrl"], "https://example.com", "{json}");
    }
}
