//! Servers written as methods: what [`macro@crate::server`] generates code
//! against. A type that holds the provider's state gets an `impl` block
//! marked `#[server]`; its `#[tool]`, `#[resource]` and `#[prompt]`
//! methods become the server's definitions, and the type implements
//! [`Provider`]:
//!
//! ```
//! use mcp_cluster::prelude::*;
//!
//! struct Calculator;
//!
//! #[derive(serde::Serialize, schemars::JsonSchema)]
//! struct Sum {
//!     sum: i64,
//! }
//!
//! #[server]
//! impl Calculator {
//!     /// Adds two numbers.
//!     #[tool]
//!     async fn add(&self, a: i64, b: i64) -> Json<Sum> {
//!         Json(Sum { sum: a + b })
//!     }
//! }
//!
//! let server = Calculator.into_server();
//! ```
//!
//! # Methods
//! Every method takes `&self` (handlers run concurrently: mutable state
//! goes behind a `Mutex` or an atomic) and may be `async` or not.
//!
//! - **Arguments**: one parameter per argument (`city: String`, `days:
//!   Option<u32>`; doc comments and `#[serde(...)]`/`#[schemars(...)]`
//!   attributes on them go to the schema), or all of them in one type,
//!   `Args(args): Args<Forecast>` with `Forecast: Deserialize + JsonSchema`.
//!   A tool's `inputSchema` is derived from them and every call is checked
//!   against it before the method runs.
//! - **The request context**: a parameter `ctx: &RequestContext` (or by
//!   value), anywhere: progress, logging, asking the client (elicitation,
//!   sampling, roots) in both protocol eras, cancellation, the principal
//!   and its scopes.
//! - **The result**: a value or a `Result<_, E>` where `E` is
//!   [`HandlerError`] or any `std::error::Error` (so `?` works): a tool
//!   error becomes a result with `isError: true` the model reads, an
//!   [`ErrorObject`] a JSON-RPC error. Tools return `String`,
//!   [`Json<T>`] (the `outputSchema` is derived from `T` and the
//!   `structuredContent` checked against it) or a [`CallToolResult`];
//!   resources `String`, [`Json<T>`], [`ResourceContents`] or a `Vec` of
//!   them; prompts `String` (one user message), [`PromptMessage`]s or a
//!   [`GetPromptResult`].
//!
//! # Attributes
//! - `#[tool(...)]`: the method's doc comment is the description (or
//!   `description = "..."`); `name`, `title`; `blocking` (runs on the
//!   blocking pool, [`ToolDef::blocking`]), `max_concurrent = 4`,
//!   `time_limit = "30s"` (or any `Duration` expression); `scopes =
//!   ["notes:write"]` (OAuth scopes a caller needs, [`ToolDef::scopes`]);
//!   `task = "optional"` or `"required"`, `task_starts_in_handler`; the
//!   hints `read_only`, `destructive`, `idempotent`, `open_world`.
//! - `#[resource("config://app")]`: a resource; with `{variables}` in the
//!   URI (`"notes://{id}"`) a template whose variables are the method's
//!   parameters (parsed with `FromStr`; a value that does not parse is
//!   "resource not found"). Options: `name`, `title`, `mime_type`,
//!   `description` (the doc comment by default).
//! - `#[prompt]`: a prompt whose arguments are the method's `String`
//!   (required) and `Option<String>` (optional) parameters. Options:
//!   `name`, `title`, `description`.
//! - `#[server(name = "...", version = "...", instructions = "...")]`: the
//!   name and version default to the package's. One `#[server]` block per
//!   type (each implements [`Provider`]); other methods of the block stay
//!   as they are.
//!
//! # Mixing with the builder
//! [`Provider::into_builder`] gives a [`ServerBuilder`] that takes more
//! definitions (tools known only at run time), and
//! [`ServerBuilder::provider`] adds a provider's methods to any builder, so
//! several providers can make one server.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;

use mcp_cluster_protocol::types::{
    CallToolResult, Content, GetPromptResult, PromptMessage, ResourceContents,
};
use mcp_cluster_protocol::{ErrorCode, ErrorObject};
use mcp_cluster_runtime::AskError;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::prompt::PromptDef;
use crate::resource::{ResourceDef, TemplateDef};
use crate::server::{McpServer, ServerBuilder};
use crate::tool::{ToolDef, schema_of};

/// A type whose `impl` block is marked [`macro@crate::server`]: its methods
/// are a server's tools, resources and prompts.
pub trait Provider: Send + Sync + Sized + 'static {
    /// The server's name (`serverInfo.name`).
    const NAME: &'static str;
    /// The server's version.
    const VERSION: &'static str;
    /// Usage hints sent in `initialize`.
    const INSTRUCTIONS: Option<&'static str>;

    /// Adds this provider's definitions to `builder`; the handlers share
    /// `self`.
    fn register(self: Arc<Self>, builder: ServerBuilder) -> ServerBuilder;

    /// A builder named after the provider, holding its definitions, to add
    /// more (tools known only at run time) before [`ServerBuilder::build`].
    fn into_builder(self) -> ServerBuilder {
        Arc::new(self).shared_builder()
    }

    /// [`Self::into_builder`] for a provider the caller keeps a handle on.
    fn shared_builder(self: Arc<Self>) -> ServerBuilder {
        let mut builder = ServerBuilder::new(Self::NAME, Self::VERSION);
        if let Some(text) = Self::INSTRUCTIONS {
            builder = builder.instructions(text);
        }
        self.register(builder)
    }

    /// The server.
    fn into_server(self) -> McpServer {
        self.into_builder().build()
    }
}

impl ServerBuilder {
    /// Adds the tools, resources and prompts of a [`Provider`].
    #[must_use]
    pub fn provider<P: Provider>(self, provider: P) -> Self {
        Arc::new(provider).register(self)
    }

    /// [`Self::provider`] for a provider the caller keeps a handle on.
    #[must_use]
    pub fn shared_provider<P: Provider>(self, provider: Arc<P>) -> Self {
        provider.register(self)
    }
}

/// A structured result: as a tool's output, `T` is the `outputSchema` and
/// the value the `structuredContent` (also sent as JSON text); as a
/// resource, JSON text (`application/json`).
///
/// A tool's `T` serializes to a JSON object (a struct or a map): MCP output
/// schemas describe objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Json<T>(pub T);

/// All of a tool's arguments in one type:
/// `async fn search(&self, Args(query): Args<Query>)`, with `Query:
/// Deserialize + JsonSchema`; the input schema is `Query`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Args<T>(pub T);

/// Why a handler failed: a tool error (the tool ran and failed; the model
/// sees the message in a result with `isError: true`) or a protocol error
/// (a JSON-RPC error, such as invalid params).
///
/// `?` turns any `std::error::Error` into one: an [`ErrorObject`] stays a
/// protocol error, every other error (including an [`AskError`]: the
/// client could not or would not answer) is a tool error carrying its
/// message and its sources'. In a resource or a prompt, which have no tool
/// errors, a tool error is answered -32603 with its message.
pub struct HandlerError(Failure);

enum Failure {
    Tool(String),
    Protocol(ErrorObject),
}

impl HandlerError {
    /// A tool error: the model reads `message`.
    pub fn tool(message: impl fmt::Display) -> Self {
        Self(Failure::Tool(message.to_string()))
    }

    /// A JSON-RPC error.
    pub fn protocol(error: ErrorObject) -> Self {
        Self(Failure::Protocol(error))
    }

    /// A JSON-RPC invalid-params error (-32602).
    pub fn invalid_params(message: impl fmt::Display) -> Self {
        Self::protocol(ErrorObject::invalid_params(message.to_string()))
    }

    /// Whether this is a JSON-RPC error.
    pub fn is_protocol(&self) -> bool {
        matches!(self.0, Failure::Protocol(_))
    }

    fn into_tool_result(self) -> Result<CallToolResult, ErrorObject> {
        match self.0 {
            Failure::Tool(message) => Ok(CallToolResult::error(message)),
            Failure::Protocol(error) => Err(error),
        }
    }

    fn into_error_object(self) -> ErrorObject {
        match self.0 {
            Failure::Tool(message) => ErrorObject::internal(message),
            Failure::Protocol(error) => error,
        }
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Failure::Tool(message) => f.debug_tuple("Tool").field(message).finish(),
            Failure::Protocol(error) => f.debug_tuple("Protocol").field(error).finish(),
        }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Failure::Tool(message) => f.write_str(message),
            Failure::Protocol(error) => write!(f, "{} ({})", error.message, error.code.0),
        }
    }
}

// Not `std::error::Error` itself, so that this blanket conversion can
// exist (as anyhow does).
impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(err: E) -> Self {
        let any: Box<dyn std::any::Any> = Box::new(err);
        let any = match any.downcast::<ErrorObject>() {
            Ok(error) => return Self::protocol(*error),
            Err(other) => other,
        };
        let any = match any.downcast::<AskError>() {
            Ok(err) => return Self::tool(format!("asking the client failed: {err}")),
            Err(other) => other,
        };
        // The `E` it was built from.
        match any.downcast::<E>() {
            Ok(err) => {
                let mut message = err.to_string();
                let mut source = err.source();
                while let Some(cause) = source {
                    message.push_str(": ");
                    message.push_str(&cause.to_string());
                    source = cause.source();
                }
                Self::tool(message)
            }
            Err(_) => Self::tool("the tool failed"),
        }
    }
}

/// What a tool's method may return on success.
pub trait ToolOutput {
    /// The `outputSchema` this output declares.
    fn output_schema() -> Option<Value> {
        None
    }

    /// The result.
    ///
    /// # Errors
    /// The output cannot be encoded.
    fn into_call_result(self) -> Result<CallToolResult, HandlerError>;
}

impl ToolOutput for String {
    fn into_call_result(self) -> Result<CallToolResult, HandlerError> {
        Ok(CallToolResult::text(self))
    }
}

impl ToolOutput for CallToolResult {
    fn into_call_result(self) -> Result<CallToolResult, HandlerError> {
        Ok(self)
    }
}

impl ToolOutput for Vec<Content> {
    fn into_call_result(self) -> Result<CallToolResult, HandlerError> {
        Ok(CallToolResult::success(self))
    }
}

impl<T: Serialize + JsonSchema> ToolOutput for Json<T> {
    fn output_schema() -> Option<Value> {
        Some(schema_of::<T>())
    }

    fn into_call_result(self) -> Result<CallToolResult, HandlerError> {
        match serde_json::to_value(self.0) {
            Ok(Value::Object(object)) => Ok(CallToolResult::structured(object)),
            Ok(_) => Err(HandlerError::protocol(ErrorObject::internal(
                "tool output is not a JSON object",
            ))),
            Err(err) => Err(HandlerError::protocol(ErrorObject::internal(format!(
                "tool output could not be encoded: {err}"
            )))),
        }
    }
}

/// What a tool's method returns: a [`ToolOutput`] or a `Result` of one.
pub trait IntoToolResult {
    /// The `outputSchema` the output declares.
    fn output_schema() -> Option<Value>;

    /// The answer to `tools/call`.
    ///
    /// # Errors
    /// A protocol error.
    fn into_tool_result(self) -> Result<CallToolResult, ErrorObject>;
}

impl<T: ToolOutput> IntoToolResult for T {
    fn output_schema() -> Option<Value> {
        T::output_schema()
    }

    fn into_tool_result(self) -> Result<CallToolResult, ErrorObject> {
        self.into_call_result()
            .or_else(HandlerError::into_tool_result)
    }
}

impl<T: ToolOutput, E: Into<HandlerError>> IntoToolResult for Result<T, E> {
    fn output_schema() -> Option<Value> {
        T::output_schema()
    }

    fn into_tool_result(self) -> Result<CallToolResult, ErrorObject> {
        self.map_err(Into::into)
            .and_then(ToolOutput::into_call_result)
            .or_else(HandlerError::into_tool_result)
    }
}

/// What a resource's method may return on success.
pub trait ResourceOutput {
    /// The contents read at `uri`; `mime_type` is the one declared, if any.
    ///
    /// # Errors
    /// The output cannot be encoded.
    fn into_contents(
        self,
        uri: &str,
        mime_type: Option<&str>,
    ) -> Result<Vec<ResourceContents>, HandlerError>;
}

impl ResourceOutput for String {
    fn into_contents(
        self,
        uri: &str,
        mime_type: Option<&str>,
    ) -> Result<Vec<ResourceContents>, HandlerError> {
        let mime_type = mime_type.unwrap_or("text/plain");
        Ok(vec![ResourceContents::text(uri, mime_type, self)])
    }
}

impl<T: Serialize> ResourceOutput for Json<T> {
    fn into_contents(
        self,
        uri: &str,
        mime_type: Option<&str>,
    ) -> Result<Vec<ResourceContents>, HandlerError> {
        let text = serde_json::to_string(&self.0).map_err(|err| {
            HandlerError::protocol(ErrorObject::internal(format!(
                "resource could not be encoded: {err}"
            )))
        })?;
        let mime_type = mime_type.unwrap_or("application/json");
        Ok(vec![ResourceContents::text(uri, mime_type, text)])
    }
}

impl ResourceOutput for ResourceContents {
    fn into_contents(
        self,
        _: &str,
        _: Option<&str>,
    ) -> Result<Vec<ResourceContents>, HandlerError> {
        Ok(vec![self])
    }
}

impl ResourceOutput for Vec<ResourceContents> {
    fn into_contents(
        self,
        _: &str,
        _: Option<&str>,
    ) -> Result<Vec<ResourceContents>, HandlerError> {
        Ok(self)
    }
}

/// What a resource's method returns: a [`ResourceOutput`] or a `Result` of
/// one.
pub trait IntoResourceResult {
    /// The answer to `resources/read`.
    ///
    /// # Errors
    /// The handler's error, as a JSON-RPC error.
    fn into_resource_result(
        self,
        uri: &str,
        mime_type: Option<&str>,
    ) -> Result<Vec<ResourceContents>, ErrorObject>;
}

impl<T: ResourceOutput> IntoResourceResult for T {
    fn into_resource_result(
        self,
        uri: &str,
        mime_type: Option<&str>,
    ) -> Result<Vec<ResourceContents>, ErrorObject> {
        self.into_contents(uri, mime_type)
            .map_err(HandlerError::into_error_object)
    }
}

impl<T: ResourceOutput, E: Into<HandlerError>> IntoResourceResult for Result<T, E> {
    fn into_resource_result(
        self,
        uri: &str,
        mime_type: Option<&str>,
    ) -> Result<Vec<ResourceContents>, ErrorObject> {
        self.map_err(Into::into)
            .and_then(|output| output.into_contents(uri, mime_type))
            .map_err(HandlerError::into_error_object)
    }
}

/// What a prompt's method may return on success.
pub trait PromptOutput {
    /// The rendered prompt.
    fn into_prompt(self) -> GetPromptResult;
}

impl PromptOutput for String {
    fn into_prompt(self) -> GetPromptResult {
        vec![PromptMessage::user(Content::text(self))].into_prompt()
    }
}

impl PromptOutput for PromptMessage {
    fn into_prompt(self) -> GetPromptResult {
        vec![self].into_prompt()
    }
}

impl PromptOutput for Vec<PromptMessage> {
    fn into_prompt(self) -> GetPromptResult {
        GetPromptResult {
            description: None,
            messages: self,
        }
    }
}

impl PromptOutput for GetPromptResult {
    fn into_prompt(self) -> GetPromptResult {
        self
    }
}

/// What a prompt's method returns: a [`PromptOutput`] or a `Result` of one.
pub trait IntoPromptResult {
    /// The answer to `prompts/get`.
    ///
    /// # Errors
    /// The handler's error, as a JSON-RPC error.
    fn into_prompt_result(self) -> Result<GetPromptResult, ErrorObject>;
}

impl<T: PromptOutput> IntoPromptResult for T {
    fn into_prompt_result(self) -> Result<GetPromptResult, ErrorObject> {
        Ok(self.into_prompt())
    }
}

impl<T: PromptOutput, E: Into<HandlerError>> IntoPromptResult for Result<T, E> {
    fn into_prompt_result(self) -> Result<GetPromptResult, ErrorObject> {
        self.map(PromptOutput::into_prompt)
            .map_err(|err| err.into().into_error_object())
    }
}

/// What the generated code calls; not an API.
#[doc(hidden)]
pub mod __private {
    pub use std::sync::Arc;

    pub use mcp_cluster_runtime::RequestContext;
    pub use {schemars, serde};

    use super::*;

    pub type Variables = BTreeMap<String, String>;
    pub type JsonObject = Map<String, Value>;

    pub fn tool<A, R, F, Fut>(name: &str, description: &str, handler: F) -> ToolDef
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoToolResult,
    {
        let handler = Arc::new(handler);
        let def = ToolDef::typed(name, description, move |args: A, ctx| {
            let run = handler(args, ctx);
            async move { run.await.into_tool_result() }
        });
        match R::output_schema() {
            None => def,
            Some(schema) => def.output_schema(schema).unwrap_or_else(|err| {
                panic!("{err}: a tool's Json<T> output is a struct or a map (an object)")
            }),
        }
    }

    pub fn resource<F, Fut>(uri: &str, name: &str, mime_type: Option<&str>, read: F) -> ResourceDef
    where
        F: Fn(String, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ErrorObject>> + Send + 'static,
    {
        let def = ResourceDef::new(uri, name, read);
        match mime_type {
            Some(mime_type) => def.mime_type(mime_type),
            None => def,
        }
    }

    pub fn template<F, Fut>(
        uri_template: &str,
        name: &str,
        mime_type: Option<&str>,
        read: F,
    ) -> TemplateDef
    where
        F: Fn(String, Variables, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ErrorObject>> + Send + 'static,
    {
        let def = TemplateDef::new(uri_template, name, read)
            .unwrap_or_else(|err| panic!("resource template {uri_template:?}: {err}"));
        match mime_type {
            Some(mime_type) => def.mime_type(mime_type),
            None => def,
        }
    }

    pub fn contents<R: IntoResourceResult>(
        outcome: R,
        uri: &str,
        mime_type: Option<&str>,
    ) -> Result<Vec<ResourceContents>, ErrorObject> {
        outcome.into_resource_result(uri, mime_type)
    }

    /// A template variable parsed; one that does not parse names no
    /// resource.
    pub fn variable<T: FromStr>(uri: &str, vars: &Variables, name: &str) -> Result<T, ErrorObject> {
        vars.get(name)
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| {
                ErrorObject::new(ErrorCode::RESOURCE_NOT_FOUND, "resource not found")
                    .with_data(serde_json::json!({ "uri": uri }))
            })
    }

    pub fn prompt<F, Fut>(name: &str, description: &str, get: F) -> PromptDef
    where
        F: Fn(JsonObject, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, ErrorObject>> + Send + 'static,
    {
        PromptDef::new(name, description, get)
    }

    pub fn messages<R: IntoPromptResult>(outcome: R) -> Result<GetPromptResult, ErrorObject> {
        outcome.into_prompt_result()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mcp_cluster_protocol::types::{GetPromptResult, PromptMessage, ResourceContents};
    use mcp_cluster_runtime::{McpService, TaskSupport};

    use crate::prelude::*;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Query {
        text: String,
    }

    const ADMIN: &str = "every:admin";

    /// Every option and return type the macros take, compiled and built.
    struct Everything;

    #[server(name = "everything", version = "2.0.0")]
    impl Everything {
        #[tool(
            name = "find",
            title = "Find",
            description = "Finds text.",
            task = "optional",
            open_world = false,
            max_concurrent = 1 + 1,
            time_limit = Duration::from_secs(3),
            scopes = ["every:read", ADMIN]
        )]
        fn search(&self, Args(query): Args<Query>) -> CallToolResult {
            CallToolResult::text(query.text)
        }

        /// Starts its task itself.
        #[tool(task = "required", task_starts_in_handler)]
        async fn job(&self, ctx: RequestContext) -> Result<String, ErrorObject> {
            ctx.become_task().await;
            Ok("done".into())
        }

        #[resource("every://all", mime_type = "text/plain")]
        fn all(&self, ctx: &RequestContext) -> Vec<ResourceContents> {
            let _ = ctx;
            Vec::new()
        }

        #[resource("every://{a}/{b}")]
        async fn pair(&self, a: u8, b: String) -> Result<ResourceContents, HandlerError> {
            Ok(ResourceContents::text(
                format!("every://{a}/{b}"),
                "text/plain",
                b,
            ))
        }

        /// Two messages.
        #[prompt(name = "two")]
        fn two_messages(&self) -> Vec<PromptMessage> {
            Vec::new()
        }

        #[prompt]
        async fn whole(&self, r#type: Option<String>) -> Result<GetPromptResult, HandlerError> {
            Err(HandlerError::tool(r#type.unwrap_or_default()))
        }
    }

    /// Parameter attributes in the order rustfmt leaves them: the doc
    /// comment first, then `#[schemars]`; both reach the input schema.
    struct Limited;

    #[server]
    impl Limited {
        /// Names a thing.
        #[tool]
        fn name_it(
            &self,
            /// The name.
            #[schemars(length(min = 1, max = 4))]
            name: String,
            #[schemars(range(max = 9))]
            /// How many.
            count: Option<u32>,
        ) -> String {
            format!("{name}{count:?}")
        }
    }

    #[test]
    fn parameter_attributes_reach_the_schema_in_any_order() {
        let builder = Limited.into_builder();
        let tool = &builder.catalog.tools[0];
        let schema = &tool.tool.input_schema;
        let name = &schema["properties"]["name"];
        assert_eq!(name["maxLength"], 4, "{schema}");
        assert_eq!(name["minLength"], 1, "{schema}");
        assert_eq!(name["description"], "The name.", "{schema}");
        let count = &schema["properties"]["count"];
        assert_eq!(count["maximum"], 9, "{schema}");
        assert_eq!(count["description"], "How many.", "{schema}");
        assert!(
            !tool
                .input_errors(&serde_json::json!({"name": "long name"}))
                .is_empty()
        );
        assert!(
            tool.input_errors(&serde_json::json!({"name": "ok"}))
                .is_empty()
        );
    }

    #[test]
    fn every_option_reaches_the_definitions() {
        let server = Everything.into_server();
        assert_eq!(server.server_info().name, "everything");
        assert_eq!(server.server_info().version, "2.0.0");
        assert!(server.has_tool("find") && !server.has_tool("search"));
        assert_eq!(server.task_support("find"), TaskSupport::Optional);
        assert_eq!(server.task_support("job"), TaskSupport::Required);
        assert!(server.task_starts_in_handler("job"));
        assert_eq!(server.tool_scopes("find"), ["every:read", ADMIN]);
        assert!(server.has_resource("every://all"));
        assert!(server.has_resource("every://1/x"));
        assert!(server.has_prompt("two") && server.has_prompt("whole"));
    }
}
