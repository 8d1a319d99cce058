//! Resources: static ones with a read handler, and templates that match
//! many URIs.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{Icon, Resource, ResourceContents, ResourceTemplate};
use mcp_cluster_runtime::RequestContext;

use crate::uri_template::{TemplateError, UriTemplate};

/// Reads a resource by URI.
pub type ReadHandler = Arc<
    dyn Fn(String, RequestContext) -> BoxFuture<'static, Result<Vec<ResourceContents>, ErrorObject>>
        + Send
        + Sync,
>;

/// Reads a templated resource: the URI and the template's variables.
pub type TemplateHandler = Arc<
    dyn Fn(
            String,
            BTreeMap<String, String>,
            RequestContext,
        ) -> BoxFuture<'static, Result<Vec<ResourceContents>, ErrorObject>>
        + Send
        + Sync,
>;

/// Completes a value: argument name and the prefix typed so far.
pub type Completer = Arc<dyn Fn(&str, &str) -> Vec<String> + Send + Sync>;

/// A resource at a fixed URI.
#[derive(Clone)]
pub struct ResourceDef {
    pub(crate) resource: Resource,
    pub(crate) read: ReadHandler,
}

impl std::fmt::Debug for ResourceDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceDef")
            .field("uri", &self.resource.uri)
            .finish()
    }
}

impl ResourceDef {
    /// A resource read by a handler.
    pub fn new<F, Fut>(uri: &str, name: &str, read: F) -> Self
    where
        F: Fn(String, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ErrorObject>> + Send + 'static,
    {
        Self {
            resource: Resource {
                uri: uri.to_owned(),
                name: name.to_owned(),
                title: None,
                description: None,
                mime_type: None,
                icons: None,
            },
            read: Arc::new(move |uri, ctx| Box::pin(read(uri, ctx))),
        }
    }

    /// A resource with fixed text.
    pub fn text(uri: &str, name: &str, mime_type: &str, text: &str) -> Self {
        let contents = ResourceContents::text(uri, mime_type, text);
        Self::new(uri, name, move |_, _| {
            let contents = contents.clone();
            async move { Ok(vec![contents]) }
        })
        .mime_type(mime_type)
    }

    /// Sets the display title.
    #[must_use]
    pub fn title(mut self, title: &str) -> Self {
        self.resource.title = Some(title.to_owned());
        self
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, description: &str) -> Self {
        self.resource.description = Some(description.to_owned());
        self
    }

    /// Sets the MIME type.
    #[must_use]
    pub fn mime_type(mut self, mime_type: &str) -> Self {
        self.resource.mime_type = Some(mime_type.to_owned());
        self
    }

    /// Adds an icon clients may show for it (2025-11-25 and later).
    #[must_use]
    pub fn icon(mut self, icon: Icon) -> Self {
        self.resource.icons.get_or_insert_with(Vec::new).push(icon);
        self
    }
}

/// A family of resources matching a URI template.
#[derive(Clone)]
pub struct TemplateDef {
    pub(crate) template: ResourceTemplate,
    pub(crate) matcher: UriTemplate,
    pub(crate) read: TemplateHandler,
    pub(crate) complete: Option<Completer>,
}

impl std::fmt::Debug for TemplateDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateDef")
            .field("uri_template", &self.template.uri_template)
            .finish()
    }
}

impl TemplateDef {
    /// A template read by a handler.
    ///
    /// # Errors
    /// [`TemplateError`] for templates beyond `{var}` expansions.
    pub fn new<F, Fut>(uri_template: &str, name: &str, read: F) -> Result<Self, TemplateError>
    where
        F: Fn(String, BTreeMap<String, String>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ErrorObject>> + Send + 'static,
    {
        Ok(Self {
            template: ResourceTemplate {
                uri_template: uri_template.to_owned(),
                name: name.to_owned(),
                title: None,
                description: None,
                mime_type: None,
                icons: None,
            },
            matcher: UriTemplate::parse(uri_template)?,
            read: Arc::new(move |uri, vars, ctx| Box::pin(read(uri, vars, ctx))),
            complete: None,
        })
    }

    /// Sets the display title.
    #[must_use]
    pub fn title(mut self, title: &str) -> Self {
        self.template.title = Some(title.to_owned());
        self
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, description: &str) -> Self {
        self.template.description = Some(description.to_owned());
        self
    }

    /// Sets the MIME type.
    #[must_use]
    pub fn mime_type(mut self, mime_type: &str) -> Self {
        self.template.mime_type = Some(mime_type.to_owned());
        self
    }

    /// Adds an icon clients may show for it (2025-11-25 and later).
    #[must_use]
    pub fn icon(mut self, icon: Icon) -> Self {
        self.template.icons.get_or_insert_with(Vec::new).push(icon);
        self
    }

    /// Completes template variables (`completion/complete`, `ref/resource`).
    #[must_use]
    pub fn completer(
        mut self,
        complete: impl Fn(&str, &str) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.complete = Some(Arc::new(complete));
        self
    }
}
