//! Tool definitions: description, validated input, checked output, handler.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{
    CallToolResult, Icon, JsonObject, Tool, ToolAnnotations, ToolExecution,
};
use mcp_cluster_runtime::{MirroredParam, RequestContext, TaskSupport};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A tool handler: arguments (already valid against the input schema) and
/// the request context in, a result or a JSON-RPC error out. A tool that
/// ran and failed returns [`CallToolResult::error`], not a JSON-RPC error.
pub type ToolHandler = Arc<
    dyn Fn(JsonObject, RequestContext) -> BoxFuture<'static, Result<CallToolResult, ErrorObject>>
        + Send
        + Sync,
>;

/// Why a tool definition is rejected at registration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DefinitionError {
    /// The input or output schema is not a valid JSON Schema.
    #[error("tool {tool}: invalid {which} schema: {reason}")]
    Schema {
        /// The tool.
        tool: String,
        /// `input` or `output`.
        which: &'static str,
        /// What the validator said.
        reason: String,
    },
    /// An `x-mcp-header` annotation breaks the transport's rules.
    #[error("tool {tool}: invalid x-mcp-header: {reason}")]
    MirroredParam {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
}

/// One tool.
#[derive(Clone)]
pub struct ToolDef {
    pub(crate) tool: Tool,
    pub(crate) input: Arc<jsonschema::Validator>,
    pub(crate) output: Option<Arc<jsonschema::Validator>>,
    pub(crate) mirrored: Vec<MirroredParam>,
    pub(crate) handler: ToolHandler,
    /// OAuth scopes a caller's token needs to call the tool (when
    /// authorization is on), beside the scopes every request needs.
    pub(crate) scopes: Vec<String>,
    /// Whether it runs as a task for clients of the tasks extension.
    pub(crate) task: TaskSupport,
    /// Its handler starts the task ([`RequestContext::become_task`]).
    pub(crate) task_in_handler: bool,
    /// Where it runs and how much of it at once, for how long.
    pub(crate) limits: Limits,
}

/// A tool's execution settings ([`ToolDef::blocking`],
/// [`ToolDef::max_concurrent`], [`ToolDef::time_limit`]).
#[derive(Clone, Default)]
pub(crate) struct Limits {
    blocking: bool,
    /// Calls running on this node, with the most allowed.
    concurrent: Option<(Arc<tokio::sync::Semaphore>, usize)>,
    time_limit: Option<Duration>,
}

impl std::fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.tool.name)
            .finish()
    }
}

impl ToolDef {
    /// A tool with a hand-written input schema (sent verbatim in
    /// `tools/list`) and an untyped handler.
    ///
    /// # Errors
    /// [`DefinitionError`] when the schema does not compile or an
    /// `x-mcp-header` annotation is invalid.
    pub fn new<F, Fut>(
        name: &str,
        description: &str,
        input_schema: Value,
        handler: F,
    ) -> Result<Self, DefinitionError>
    where
        F: Fn(JsonObject, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CallToolResult, ErrorObject>> + Send + 'static,
    {
        let input = compile(name, "input", &input_schema)?;
        let mirrored = mirrored_params(name, &input_schema)?;
        Ok(Self {
            tool: Tool {
                name: name.to_owned(),
                title: None,
                description: description.to_owned(),
                input_schema,
                output_schema: None,
                annotations: None,
                icons: None,
                execution: None,
            },
            input: Arc::new(input),
            output: None,
            mirrored,
            handler: Arc::new(move |args, ctx| Box::pin(handler(args, ctx))),
            scopes: Vec::new(),
            task: TaskSupport::Forbidden,
            task_in_handler: false,
            limits: Limits::default(),
        })
    }

    /// A tool whose arguments deserialize into `A`; the input schema is
    /// derived from `A`.
    pub fn typed<A, F, Fut>(name: &str, description: &str, handler: F) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<CallToolResult, ErrorObject>> + Send + 'static,
    {
        let schema = schema_of::<A>();
        let handler = Arc::new(handler);
        let wrapped = move |args: JsonObject, ctx: RequestContext| {
            let handler = Arc::clone(&handler);
            async move {
                let args: A = serde_json::from_value(Value::Object(args)).map_err(|err| {
                    ErrorObject::invalid_params(format!("invalid arguments: {err}"))
                })?;
                handler(args, ctx).await
            }
        };
        // expect: a schema derived by schemars always compiles.
        #[allow(clippy::expect_used)]
        Self::new(name, description, schema, wrapped).expect("derived schemas are valid")
    }

    /// Declares the output schema, derived from `O`. The handler must then
    /// return structured content ([`CallToolResult::structured`]) that
    /// conforms to it: a successful result without `structuredContent`, or
    /// with one that does not match, is answered -32603 and logged as an
    /// error naming the tool. Tools without an output schema may return
    /// structured content or not; results without it carry no
    /// `structuredContent` field.
    #[must_use]
    pub fn output<O: JsonSchema>(self) -> Self {
        // expect: a schema derived by schemars always compiles.
        #[allow(clippy::expect_used)]
        self.output_schema(schema_of::<O>())
            .expect("derived schemas are valid")
    }

    /// Declares a hand-written output schema (same rules as
    /// [`Self::output`]).
    ///
    /// # Errors
    /// [`DefinitionError::Schema`] when it does not compile.
    pub fn output_schema(mut self, schema: Value) -> Result<Self, DefinitionError> {
        self.output = Some(Arc::new(compile(&self.tool.name, "output", &schema)?));
        self.tool.output_schema = Some(schema);
        Ok(self)
    }

    /// Sets the display title.
    #[must_use]
    pub fn title(mut self, title: &str) -> Self {
        self.tool.title = Some(title.to_owned());
        self
    }

    /// Adds an icon clients may show for it (2025-11-25 and later).
    #[must_use]
    pub fn icon(mut self, icon: Icon) -> Self {
        self.tool.icons.get_or_insert_with(Vec::new).push(icon);
        self
    }

    /// Sets the behaviour hints.
    #[must_use]
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.tool.annotations = Some(annotations);
        self
    }

    /// Changes behaviour hints in place (starting from none set).
    #[must_use]
    pub fn annotate(mut self, change: impl FnOnce(&mut ToolAnnotations)) -> Self {
        change(
            self.tool
                .annotations
                .get_or_insert_with(ToolAnnotations::default),
        );
        self
    }

    /// OAuth scopes a caller needs to call this tool, when authorization is
    /// on: a token without them gets HTTP 403 `insufficient_scope` naming
    /// them, and the client can ask its user for more (step-up).
    #[must_use]
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// Runs the tool as a task: for 2026-07-28 clients that declare the
    /// tasks extension, and for task-augmented calls (`params.task`) in
    /// 2025-11-25 sessions, whose `tools/list` says so
    /// (`execution.taskSupport`). [`TaskSupport::Optional`] answers other
    /// calls synchronously; [`TaskSupport::Required`] refuses them
    /// (2026-07-28: -32021; 2025-11-25: -32601).
    #[must_use]
    pub fn task(mut self, support: TaskSupport) -> Self {
        self.task = support;
        self.tool.execution = (support != TaskSupport::Forbidden).then_some(ToolExecution {
            task_support: Some(support),
        });
        self
    }

    /// The task starts when the handler calls
    /// [`RequestContext::become_task`] (after asking what it needs as
    /// input-required rounds), not before the handler runs.
    #[must_use]
    pub fn task_starts_in_handler(mut self) -> Self {
        self.task_in_handler = true;
        self
    }

    /// The handler blocks its thread (file or database calls without
    /// `async`, a CPU-heavy computation, a blocking client library): it
    /// runs on the node's blocking pool (`[runtime] blocking_threads`
    /// threads at most; calls beyond wait for one) instead of the
    /// executor's threads, which the other handlers share. The handler
    /// keeps its async signature and its context (progress, log, asking
    /// the client); its blocking calls are simply allowed.
    ///
    /// An undeclared handler that blocks still delays no connection,
    /// stream or `initialize` (handlers never run on the HTTP workers),
    /// but it holds one executor thread (`executor_threads`) while it
    /// blocks.
    #[must_use]
    pub fn blocking(mut self) -> Self {
        self.limits.blocking = true;
        self
    }

    /// At most `calls` calls of this tool run at once on a node; one more
    /// is refused at once with -32603 `tool <name> is busy: <calls> calls
    /// already running` (the client may retry). A blocking call stopped by
    /// its time limit keeps its place until its thread is done.
    ///
    /// # Panics
    /// `calls` is 0 (a tool nobody can call is a definition error).
    #[must_use]
    pub fn max_concurrent(mut self, calls: usize) -> Self {
        assert!(
            calls > 0,
            "tool {}: max_concurrent must be positive",
            self.tool.name
        );
        self.limits.concurrent = Some((Arc::new(tokio::sync::Semaphore::new(calls)), calls));
        self
    }

    /// A call running longer than `limit` is stopped and answered -32603
    /// `tool <name> stopped: it ran longer than its time limit of <limit>`
    /// (below the node's `request_timeout_secs`, which applies to every
    /// request). An async handler is dropped at its next await; a blocking
    /// one cannot be interrupted: its answer goes out on time and its
    /// thread finishes on its own.
    #[must_use]
    pub fn time_limit(mut self, limit: Duration) -> Self {
        self.limits.time_limit = Some(limit);
        self
    }

    /// Runs the handler under the tool's limits.
    pub(crate) async fn call(
        &self,
        args: JsonObject,
        ctx: RequestContext,
    ) -> Result<CallToolResult, ErrorObject> {
        let name = &self.tool.name;
        let permit = match &self.limits.concurrent {
            Some((calls, most)) => Some(Arc::clone(calls).try_acquire_owned().map_err(|_| {
                ErrorObject::internal(format!("tool {name} is busy: {most} calls already running"))
            })?),
            None => None,
        };
        let handler = (self.handler)(args, ctx);
        let run = async move {
            if !self.limits.blocking {
                let _permit = permit;
                return handler.await;
            }
            let runtime = tokio::runtime::Handle::current();
            let blocking = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                runtime.block_on(handler)
            });
            match blocking.await {
                Ok(outcome) => outcome,
                // The request's own panic handling answers it.
                Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
                Err(_) => Err(ErrorObject::internal(format!(
                    "tool {name} stopped: the server is shutting down"
                ))),
            }
        };
        match self.limits.time_limit {
            None => run.await,
            Some(limit) => tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
                tracing::warn!(tool = %name, limit_ms = limit.as_millis() as u64, "Tool call stopped by its time limit.");
                Err(ErrorObject::internal(format!(
                    "tool {name} stopped: it ran longer than its time limit of {limit:?}"
                )))
            }),
        }
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.tool.name
    }

    /// Validation errors of `args` against the input schema (empty: valid).
    pub(crate) fn input_errors(&self, args: &Value) -> Vec<String> {
        self.input
            .iter_errors(args)
            .take(5)
            .map(|e| describe(&e))
            .collect()
    }

    /// Validation errors of `structuredContent` against the output schema.
    pub(crate) fn output_errors(&self, structured: &Value) -> Vec<String> {
        match &self.output {
            Some(v) => v
                .iter_errors(structured)
                .take(5)
                .map(|e| describe(&e))
                .collect(),
            None => Vec::new(),
        }
    }
}

fn describe(err: &jsonschema::ValidationError<'_>) -> String {
    let path = err.instance_path.to_string();
    if path.is_empty() {
        err.to_string()
    } else {
        format!("{path}: {err}")
    }
}

/// The JSON Schema of a Rust type, as an MCP input or output schema.
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut schema {
        // The type name is noise in a tool listing.
        map.remove("title");
    }
    schema
}

fn compile(
    tool: &str,
    which: &'static str,
    schema: &Value,
) -> Result<jsonschema::Validator, DefinitionError> {
    let is_object_schema = schema.get("type").and_then(Value::as_str) == Some("object");
    if !is_object_schema {
        return Err(DefinitionError::Schema {
            tool: tool.to_owned(),
            which,
            reason: "must be an object schema (\"type\": \"object\")".into(),
        });
    }
    jsonschema::validator_for(schema).map_err(|err| DefinitionError::Schema {
        tool: tool.to_owned(),
        which,
        reason: err.to_string(),
    })
}

/// Reads `x-mcp-header` annotations ([`MirroredParam::from_input_schema`]).
fn mirrored_params(tool: &str, schema: &Value) -> Result<Vec<MirroredParam>, DefinitionError> {
    MirroredParam::from_input_schema(schema).map_err(|reason| DefinitionError::MirroredParam {
        tool: tool.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn noop(_: JsonObject, _: RequestContext) -> Result<CallToolResult, ErrorObject> {
        Ok(CallToolResult::text(""))
    }

    #[test]
    fn mirrored_params_follow_the_rules() {
        let ok = serde_json::json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}, "q": {"type": "string"}}});
        let def = ToolDef::new("t", "d", ok, noop).unwrap();
        assert_eq!(
            def.mirrored,
            vec![MirroredParam {
                header: "Region".into(),
                argument: "region".into()
            }]
        );
        for bad in [
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "a b"}}}),
            serde_json::json!({"type": "object", "properties": {"a": {"type": "object", "x-mcp-header": "A"}}}),
            // 2026-07-28: no `number`, and the name is an HTTP token.
            serde_json::json!({"type": "object", "properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            serde_json::json!({"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "A(b)"}}}),
            serde_json::json!({"type": "object", "properties": {
                "a": {"type": "string", "x-mcp-header": "X"}, "b": {"type": "string", "x-mcp-header": "x"}}}),
        ] {
            assert!(ToolDef::new("t", "d", bad, noop).is_err());
        }
    }

    #[test]
    fn non_object_schemas_are_rejected() {
        assert!(ToolDef::new("t", "d", serde_json::json!({"type": "string"}), noop).is_err());
    }
}
