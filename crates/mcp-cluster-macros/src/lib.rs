//! Attribute macros of [`mcp-cluster`](https://docs.rs/mcp-cluster): use
//! them through `mcp_cluster` (`use mcp_cluster::prelude::*`), which
//! documents them with examples.
//!
//! `#[server]` on an `impl` block of the type that holds the provider's
//! state turns its `#[tool]`, `#[resource]` and `#[prompt]` methods into
//! definitions of `mcp_cluster` (`ToolDef`, `ResourceDef`, `TemplateDef`,
//! `PromptDef`) and implements `mcp_cluster::Provider` for the type. The
//! method attributes mean something only inside such a block; alone they are
//! a compile error that says so.

use proc_macro::TokenStream;

mod expand;

/// Collects the `#[tool]`, `#[resource]` and `#[prompt]` methods of an
/// `impl` block and implements `mcp_cluster::Provider` for its type.
///
/// Options: `name = "..."`, `version = "..."` (the package's name and
/// version by default), `instructions = "..."`.
#[proc_macro_attribute]
pub fn server(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::server(attr.into(), item.into()).into()
}

/// Marks a method of a `#[server]` impl block as a tool.
#[proc_macro_attribute]
pub fn tool(_attr: TokenStream, item: TokenStream) -> TokenStream {
    alone("tool", item)
}

/// Marks a method of a `#[server]` impl block as a resource or, when its
/// URI has `{variables}`, a resource template.
#[proc_macro_attribute]
pub fn resource(_attr: TokenStream, item: TokenStream) -> TokenStream {
    alone("resource", item)
}

/// Marks a method of a `#[server]` impl block as a prompt.
#[proc_macro_attribute]
pub fn prompt(_attr: TokenStream, item: TokenStream) -> TokenStream {
    alone("prompt", item)
}

/// A method attribute outside a `#[server]` block: nothing would collect it.
fn alone(which: &str, item: TokenStream) -> TokenStream {
    let message = format!(
        "#[{which}] goes on a method of an impl block marked #[server] \
         (`#[mcp_cluster::server] impl MyServer {{ ... }}`)"
    );
    let item = proc_macro2::TokenStream::from(item);
    quote::quote!(::core::compile_error!(#message); #item).into()
}
