//! Prompts: templates of messages with arguments.

use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{GetPromptResult, Icon, Prompt, PromptArgument};
use mcp_cluster_runtime::RequestContext;
use serde_json::{Map, Value};

use crate::resource::Completer;

/// Renders a prompt from its arguments (required ones are checked first).
pub type PromptHandler = Arc<
    dyn Fn(
            Map<String, Value>,
            RequestContext,
        ) -> BoxFuture<'static, Result<GetPromptResult, ErrorObject>>
        + Send
        + Sync,
>;

/// One prompt.
#[derive(Clone)]
pub struct PromptDef {
    pub(crate) prompt: Prompt,
    pub(crate) get: PromptHandler,
    pub(crate) complete: Option<Completer>,
}

impl std::fmt::Debug for PromptDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptDef")
            .field("name", &self.prompt.name)
            .finish()
    }
}

impl PromptDef {
    /// A prompt rendered by a handler.
    pub fn new<F, Fut>(name: &str, description: &str, get: F) -> Self
    where
        F: Fn(Map<String, Value>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, ErrorObject>> + Send + 'static,
    {
        Self {
            prompt: Prompt {
                name: name.to_owned(),
                title: None,
                description: description.to_owned(),
                arguments: Vec::new(),
                icons: None,
            },
            get: Arc::new(move |args, ctx| Box::pin(get(args, ctx))),
            complete: None,
        }
    }

    /// Sets the display title.
    #[must_use]
    pub fn title(mut self, title: &str) -> Self {
        self.prompt.title = Some(title.to_owned());
        self
    }

    /// Adds an icon clients may show for it (2025-11-25 and later).
    #[must_use]
    pub fn icon(mut self, icon: Icon) -> Self {
        self.prompt.icons.get_or_insert_with(Vec::new).push(icon);
        self
    }

    /// Declares an argument.
    #[must_use]
    pub fn argument(mut self, name: &str, description: &str, required: bool) -> Self {
        self.prompt.arguments.push(PromptArgument {
            name: name.to_owned(),
            description: Some(description.to_owned()),
            required,
        });
        self
    }

    /// Completes argument values (`completion/complete`, `ref/prompt`).
    #[must_use]
    pub fn completer(
        mut self,
        complete: impl Fn(&str, &str) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.complete = Some(Arc::new(complete));
        self
    }

    /// Arguments that are required but missing or not strings.
    pub(crate) fn missing_arguments(&self, args: &Map<String, Value>) -> Vec<&str> {
        self.prompt
            .arguments
            .iter()
            .filter(|a| a.required && !args.get(&a.name).is_some_and(Value::is_string))
            .map(|a| a.name.as_str())
            .collect()
    }
}
