//! Parsing and code generation of `#[server]`, kept on `proc_macro2` so
//! unit tests can run it.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, ExprArray, ExprLit, FnArg, Ident, ImplItem, ImplItemFn, ItemImpl, Lit, LitStr,
    Meta, Pat, ReturnType, Token, Type,
};

/// The path of the runtime crate in generated code.
fn krate() -> TokenStream {
    quote!(::mcp_cluster)
}

/// `#[server(...)] impl T { ... }`.
pub(crate) fn server(attr: TokenStream, item: TokenStream) -> TokenStream {
    match server_inner(attr, item.clone()) {
        Ok(out) => out,
        // Keep the item so one mistake does not bury the rest in errors.
        Err(err) => {
            let err = err.to_compile_error();
            quote!(#err #item)
        }
    }
}

fn server_inner(attr: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let options = ServerOptions::parse(attr)?;
    let mut block: ItemImpl = syn::parse2(item)?;
    if !block.generics.params.is_empty() {
        return Err(syn::Error::new(
            block.generics.span(),
            "#[server] does not support generic impl blocks: the provider is one concrete type",
        ));
    }
    if let Some((_, path, _)) = &block.trait_ {
        return Err(syn::Error::new(
            path.span(),
            "#[server] goes on an inherent impl block (`impl MyServer { ... }`), not a trait impl",
        ));
    }
    let mut errors: Option<syn::Error> = None;
    let mut push = |err: syn::Error| match &mut errors {
        Some(all) => all.combine(err),
        None => errors = Some(err),
    };
    let mut handlers = Vec::new();
    for item in &mut block.items {
        let ImplItem::Fn(method) = item else { continue };
        let Some((kind, attr)) = take_kind(method) else {
            continue;
        };
        match Handler::parse(kind, &attr, method) {
            Ok(handler) => handlers.push(handler),
            Err(err) => push(err),
        }
        // The emitted method keeps no parameter attributes: they went to
        // the arguments' schema.
        for input in &mut method.sig.inputs {
            if let FnArg::Typed(arg) = input {
                arg.attrs.clear();
            }
        }
    }
    if let Some(errors) = errors {
        let errors = errors.to_compile_error();
        return Ok(quote!(#errors #block));
    }
    let krate = krate();
    let self_ty = &block.self_ty;
    let name = options
        .name
        .map_or_else(|| quote!(::core::env!("CARGO_PKG_NAME")), |n| quote!(#n));
    let version = options
        .version
        .map_or_else(|| quote!(::core::env!("CARGO_PKG_VERSION")), |v| quote!(#v));
    let instructions = match options.instructions {
        Some(text) => quote!(::core::option::Option::Some(#text)),
        None => quote!(::core::option::Option::None),
    };
    let mut items = Vec::new();
    let mut registrations = Vec::new();
    for handler in &handlers {
        let (item, registration) = handler.generate();
        items.extend(item);
        registrations.push(registration);
    }
    Ok(quote! {
        #block

        const _: () = {
            #(#items)*

            impl #krate::Provider for #self_ty {
                const NAME: &'static str = #name;
                const VERSION: &'static str = #version;
                const INSTRUCTIONS: ::core::option::Option<&'static str> = #instructions;

                fn register(
                    self: ::std::sync::Arc<Self>,
                    builder: #krate::ServerBuilder,
                ) -> #krate::ServerBuilder {
                    #[allow(unused_imports)]
                    use #krate::__private::{Arc, RequestContext};
                    builder #(#registrations)*
                }
            }
        };
    })
}

#[derive(Default)]
struct ServerOptions {
    name: Option<LitStr>,
    version: Option<LitStr>,
    instructions: Option<LitStr>,
}

impl ServerOptions {
    fn parse(attr: TokenStream) -> syn::Result<Self> {
        let mut options = Self::default();
        for meta in Punctuated::<Meta, Token![,]>::parse_terminated.parse2(attr)? {
            let key = key_of(&meta)?;
            let slot = match key.as_str() {
                "name" => &mut options.name,
                "version" => &mut options.version,
                "instructions" => &mut options.instructions,
                _ => {
                    return Err(unknown(
                        &meta,
                        "server",
                        &key,
                        "name, version, instructions",
                    ));
                }
            };
            *slot = Some(string_value(&meta)?);
        }
        Ok(options)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Tool,
    Resource,
    Prompt,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Resource => "resource",
            Kind::Prompt => "prompt",
        }
    }
}

/// Removes the method's `#[tool]`, `#[resource]` or `#[prompt]` (bare or
/// as a path ending so) and returns it.
fn take_kind(method: &mut ImplItemFn) -> Option<(Kind, Attribute)> {
    let position = method.attrs.iter().position(|a| kind_of(a).is_some())?;
    let attr = method.attrs.remove(position);
    kind_of(&attr).map(|kind| (kind, attr))
}

fn kind_of(attr: &Attribute) -> Option<Kind> {
    let last = attr.path().segments.last()?.ident.to_string();
    match last.as_str() {
        "tool" => Some(Kind::Tool),
        "resource" => Some(Kind::Resource),
        "prompt" => Some(Kind::Prompt),
        _ => None,
    }
}

/// A method parameter after `&self`.
enum Param {
    /// The request context, by reference or by value.
    Context { by_ref: bool },
    /// `Args<T>`: the whole arguments object.
    Whole { ty: Type },
    /// One argument (a tool's property, a prompt's argument, a template
    /// variable).
    Named {
        ident: Ident,
        ty: Type,
        attrs: Vec<Attribute>,
    },
}

/// One `#[tool]`, `#[resource]` or `#[prompt]` method.
struct Handler {
    kind: Kind,
    method: Ident,
    is_async: bool,
    params: Vec<Param>,
    /// The name (tools and prompts) or the resource's name.
    name: String,
    description: Option<String>,
    /// Resources: the URI or URI template.
    uri: Option<LitStr>,
    title: Option<LitStr>,
    mime_type: Option<LitStr>,
    /// Tools: builder calls for the options (`.blocking()`, ...).
    calls: Vec<TokenStream>,
    span: Span,
}

const TOOL_OPTIONS: &str = "name, title, description, blocking, max_concurrent, time_limit, \
     scopes, task, task_starts_in_handler, read_only, destructive, idempotent, open_world";
const RESOURCE_OPTIONS: &str = "the URI first, then name, title, description, mime_type";
const PROMPT_OPTIONS: &str = "name, title, description";

impl Handler {
    fn parse(kind: Kind, attr: &Attribute, method: &ImplItemFn) -> syn::Result<Self> {
        let sig = &method.sig;
        let span = sig.ident.span();
        let word = kind.word();
        if !sig.generics.params.is_empty() {
            return Err(syn::Error::new(
                sig.generics.span(),
                format!("a #[{word}] method cannot be generic"),
            ));
        }
        let receiver_ok = match sig.inputs.first() {
            Some(FnArg::Receiver(r)) => r.reference.is_some() && r.mutability.is_none(),
            _ => false,
        };
        if !receiver_ok {
            return Err(syn::Error::new(
                sig.span(),
                format!(
                    "a #[{word}] method takes `&self` first: handlers share the provider's \
                     state and run concurrently (keep mutable state behind a Mutex or an atomic)"
                ),
            ));
        }
        let mut handler = Handler {
            kind,
            method: sig.ident.clone(),
            is_async: sig.asyncness.is_some(),
            params: Vec::new(),
            name: unraw(&sig.ident),
            description: doc_of(&method.attrs),
            uri: None,
            title: None,
            mime_type: None,
            calls: Vec::new(),
            span,
        };
        if matches!(sig.output, ReturnType::Default) {
            return Err(syn::Error::new(
                span,
                format!(
                    "a #[{word}] method returns its result (for example `String`, `Json<T>` or \
                     `Result<..., HandlerError>`)"
                ),
            ));
        }
        handler.parse_options(attr)?;
        for input in sig.inputs.iter().skip(1) {
            let FnArg::Typed(arg) = input else { continue };
            handler.params.push(param(arg)?);
        }
        handler.check_params()?;
        if handler.description.is_none() && kind == Kind::Tool {
            return Err(syn::Error::new(
                span,
                "a tool needs a description, which the model reads to choose it: write a doc \
                 comment on the method or `#[tool(description = \"...\")]`",
            ));
        }
        Ok(handler)
    }

    fn parse_options(&mut self, attr: &Attribute) -> syn::Result<()> {
        let metas = match &attr.meta {
            Meta::Path(_) => Punctuated::new(),
            Meta::List(list) => list
                .parse_args_with(Punctuated::<Meta, Token![,]>::parse_terminated)
                .or_else(|err| {
                    // `#[resource("uri", ...)]`: the URI is a bare string.
                    if self.kind == Kind::Resource {
                        self.parse_resource_args(list.tokens.clone())
                    } else {
                        Err(err)
                    }
                })?,
            Meta::NameValue(nv) => {
                return Err(syn::Error::new(
                    nv.span(),
                    format!("write #[{}(...)]", self.kind.word()),
                ));
            }
        };
        for meta in &metas {
            self.option(meta)?;
        }
        if self.kind == Kind::Resource && self.uri.is_none() {
            return Err(syn::Error::new(
                attr.span(),
                "a #[resource] needs its URI: #[resource(\"config://app\")] or, with \
                 {variables}, a template: #[resource(\"notes://{id}\")]",
            ));
        }
        Ok(())
    }

    /// `"uri", key = value, ...`: takes the URI and returns the rest.
    fn parse_resource_args(
        &mut self,
        tokens: TokenStream,
    ) -> syn::Result<Punctuated<Meta, Token![,]>> {
        let parser = |input: syn::parse::ParseStream<'_>| {
            let uri: LitStr = input.parse()?;
            let rest = if input.is_empty() {
                Punctuated::new()
            } else {
                input.parse::<Token![,]>()?;
                Punctuated::<Meta, Token![,]>::parse_terminated(input)?
            };
            Ok((uri, rest))
        };
        let (uri, rest) = parser.parse2(tokens)?;
        self.uri = Some(uri);
        Ok(rest)
    }

    fn option(&mut self, meta: &Meta) -> syn::Result<()> {
        let key = key_of(meta)?;
        let word = self.kind.word();
        match (self.kind, key.as_str()) {
            (_, "name") => self.name = string_value(meta)?.value(),
            (_, "title") => self.title = Some(string_value(meta)?),
            (_, "description") => self.description = Some(string_value(meta)?.value()),
            (Kind::Resource, "uri") => self.uri = Some(string_value(meta)?),
            (Kind::Resource, "mime_type") => self.mime_type = Some(string_value(meta)?),
            (Kind::Tool, "blocking") => {
                flag(meta)?;
                self.calls.push(quote!(.blocking()));
            }
            (Kind::Tool, "task_starts_in_handler") => {
                flag(meta)?;
                self.calls.push(quote!(.task_starts_in_handler()));
            }
            (Kind::Tool, "max_concurrent") => {
                let value = expr_value(meta)?;
                self.calls
                    .push(quote_spanned!(value.span()=> .max_concurrent(#value)));
            }
            (Kind::Tool, "time_limit") => {
                let value = expr_value(meta)?;
                let duration = match &value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(text),
                        ..
                    }) => {
                        let millis = parse_duration(&text.value()).ok_or_else(|| {
                            syn::Error::new(
                                text.span(),
                                "a time limit like \"500ms\", \"30s\" or \"2m\"",
                            )
                        })?;
                        quote!(::core::time::Duration::from_millis(#millis))
                    }
                    other => quote!(#other),
                };
                self.calls.push(quote!(.time_limit(#duration)));
            }
            (Kind::Tool, "scopes" | "scope") => {
                let scopes = match expr_value(meta)? {
                    Expr::Array(ExprArray { elems, .. }) => elems.into_iter().collect(),
                    one => vec![one],
                };
                for scope in &scopes {
                    // Strings, or constants naming them.
                    let string = matches!(
                        scope,
                        Expr::Lit(ExprLit {
                            lit: Lit::Str(_),
                            ..
                        }) | Expr::Path(_)
                    );
                    if !string {
                        return Err(syn::Error::new(
                            scope.span(),
                            "scopes are strings: scopes = [\"notes:read\", \"notes:write\"]",
                        ));
                    }
                }
                self.calls.push(quote!(.scopes([#(#scopes),*])));
            }
            (Kind::Tool, "task") => {
                let value = string_value(meta)?;
                let krate = krate();
                let support = match value.value().as_str() {
                    "optional" => quote!(#krate::TaskSupport::Optional),
                    "required" => quote!(#krate::TaskSupport::Required),
                    "forbidden" => quote!(#krate::TaskSupport::Forbidden),
                    _ => {
                        return Err(syn::Error::new(
                            value.span(),
                            "task = \"optional\", \"required\" or \"forbidden\"",
                        ));
                    }
                };
                self.calls.push(quote!(.task(#support)));
            }
            (Kind::Tool, hint @ ("read_only" | "destructive" | "idempotent" | "open_world")) => {
                let value = match meta {
                    Meta::Path(_) => true,
                    _ => match expr_value(meta)? {
                        Expr::Lit(ExprLit {
                            lit: Lit::Bool(b), ..
                        }) => b.value,
                        other => {
                            return Err(syn::Error::new(
                                other.span(),
                                format!("{hint} = true or false"),
                            ));
                        }
                    },
                };
                let field = format_ident!("{hint}_hint");
                self.calls
                    .push(quote!(.annotate(|a| a.#field = ::core::option::Option::Some(#value))));
            }
            _ => {
                let expected = match self.kind {
                    Kind::Tool => TOOL_OPTIONS,
                    Kind::Resource => RESOURCE_OPTIONS,
                    Kind::Prompt => PROMPT_OPTIONS,
                };
                return Err(unknown(meta, word, &key, expected));
            }
        }
        Ok(())
    }

    fn check_params(&self) -> syn::Result<()> {
        let word = self.kind.word();
        let contexts = self
            .params
            .iter()
            .filter(|p| matches!(p, Param::Context { .. }))
            .count();
        if contexts > 1 {
            return Err(syn::Error::new(
                self.span,
                format!("a #[{word}] method takes the request context once"),
            ));
        }
        let whole = self
            .params
            .iter()
            .filter(|p| matches!(p, Param::Whole { .. }))
            .count();
        let named: Vec<(&Ident, &Type)> = self
            .params
            .iter()
            .filter_map(|p| match p {
                Param::Named { ident, ty, .. } => Some((ident, ty)),
                _ => None,
            })
            .collect();
        match self.kind {
            Kind::Tool if whole > 1 || (whole == 1 && !named.is_empty()) => Err(syn::Error::new(
                self.span,
                "a tool takes either `Args<T>` (all arguments in one type) or one parameter \
                 per argument, not both",
            )),
            Kind::Tool => Ok(()),
            _ if whole > 0 => Err(syn::Error::new(
                self.span,
                format!("`Args<T>` is for tools; a #[{word}] takes one parameter per argument"),
            )),
            Kind::Prompt => {
                for (ident, ty) in named {
                    if !is_string(ty) && option_inner(ty).is_none_or(|inner| !is_string(inner)) {
                        return Err(syn::Error::new(
                            ty.span(),
                            format!(
                                "prompt arguments are strings: `{ident}: String` (required) or \
                                 `{ident}: Option<String>` (optional)"
                            ),
                        ));
                    }
                }
                Ok(())
            }
            Kind::Resource => {
                let uri = self.uri.as_ref().map(LitStr::value).unwrap_or_default();
                let variables = template_variables(&uri);
                for (ident, ty) in named {
                    if !variables.contains(&unraw(ident)) {
                        let message = if variables.is_empty() {
                            format!(
                                "a resource's parameters are its URI template's variables, and \
                                 {uri:?} has none: make it a template (\"...{{{ident}}}\") or \
                                 drop `{ident}`"
                            )
                        } else {
                            format!(
                                "`{ident}` is not a variable of the URI template {uri:?} \
                                 (variables: {})",
                                variables.join(", ")
                            )
                        };
                        return Err(syn::Error::new(
                            ty.span().join(ident.span()).unwrap_or(ident.span()),
                            message,
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// The items the handler needs (the arguments' type) and its
    /// registration on the builder (`.tool(...)`).
    fn generate(&self) -> (Option<TokenStream>, TokenStream) {
        match self.kind {
            Kind::Tool => self.generate_tool(),
            Kind::Resource => (None, self.generate_resource()),
            Kind::Prompt => (None, self.generate_prompt()),
        }
    }

    /// The method call with the parameters bound to `names` in order, the
    /// context as `ctx`.
    fn call(&self, names: &[Ident]) -> TokenStream {
        let method = &self.method;
        let mut named = names.iter();
        let args = self.params.iter().map(|p| match p {
            Param::Context { by_ref: true } => quote!(&ctx),
            Param::Context { by_ref: false } => quote!(::core::clone::Clone::clone(&ctx)),
            Param::Whole { .. } | Param::Named { .. } => {
                let name = named.next();
                quote!(#name)
            }
        });
        let awaited = if self.is_async {
            quote!(.await)
        } else {
            quote!()
        };
        quote!(this.#method(#(#args),*)#awaited)
    }

    fn named(&self) -> Vec<(&Ident, &Type, &[Attribute])> {
        self.params
            .iter()
            .filter_map(|p| match p {
                Param::Named { ident, ty, attrs } => Some((ident, ty, attrs.as_slice())),
                _ => None,
            })
            .collect()
    }

    fn locals(&self) -> Vec<Ident> {
        (0..self.named().len().max(1))
            .map(|i| format_ident!("__arg{i}"))
            .collect()
    }

    fn generate_tool(&self) -> (Option<TokenStream>, TokenStream) {
        let krate = krate();
        let name = &self.name;
        let description = self.description.clone().unwrap_or_default();
        let title = self.title.as_ref().map(|t| quote!(.title(#t)));
        let calls = &self.calls;
        let whole = self.params.iter().find_map(|p| match p {
            Param::Whole { ty } => Some(ty),
            _ => None,
        });
        let locals = self.locals();
        let (item, args_ty, bind) = match whole {
            Some(ty) => {
                let local = &locals[0];
                (None, quote!(#ty), quote!(let #local = #krate::Args(args);))
            }
            None => {
                let ty = format_ident!("__{}Args", self.method);
                let named = self.named();
                let fields = named
                    .iter()
                    .map(|(ident, ty, attrs)| quote!(#(#attrs)* #ident: #ty));
                let idents = named.iter().map(|(ident, _, _)| ident);
                let locals = &locals[..named.len()];
                let item = quote! {
                    #[derive(#krate::__private::serde::Deserialize, #krate::__private::schemars::JsonSchema)]
                    #[serde(crate = "::mcp_cluster::__private::serde")]
                    #[schemars(crate = "::mcp_cluster::__private::schemars")]
                    #[allow(non_camel_case_types)]
                    struct #ty { #(#fields),* }
                };
                let bind = quote!(let #ty { #(#idents: #locals),* } = args;);
                (Some(item), quote!(#ty), bind)
            }
        };
        let call = self.call(&locals);
        let registration = quote_spanned! {self.span=>
            .tool({
                let this = Arc::clone(&self);
                #krate::__private::tool::<#args_ty, _, _, _>(
                    #name,
                    #description,
                    move |args: #args_ty, ctx: RequestContext| {
                        let this = Arc::clone(&this);
                        async move {
                            let _ = &ctx;
                            #bind
                            #call
                        }
                    },
                )
                #title
                #(#calls)*
            })
        };
        (item, registration)
    }

    fn generate_resource(&self) -> TokenStream {
        let krate = krate();
        let name = &self.name;
        let uri = self.uri.as_ref().map(LitStr::value).unwrap_or_default();
        let description = self.description.as_ref().map(|d| quote!(.description(#d)));
        let mime = match &self.mime_type {
            Some(m) => quote!(::core::option::Option::Some(#m)),
            None => quote!(::core::option::Option::None),
        };
        let title = self.title.as_ref().map(|t| quote!(.title(#t)));
        if template_variables(&uri).is_empty() {
            let call = self.call(&[]);
            return quote_spanned! {self.span=>
                .resource({
                    let this = Arc::clone(&self);
                    #krate::__private::resource(#uri, #name, #mime, move |uri: String, ctx: RequestContext| {
                        let this = Arc::clone(&this);
                        async move {
                            let _ = (&ctx, &uri);
                            let outcome = #call;
                            #krate::__private::contents(outcome, &uri, #mime)
                        }
                    })
                    #title
                    #description
                })
            };
        }
        let locals = self.locals();
        let named = self.named();
        let binds = named.iter().zip(&locals).map(|((ident, ty, _), local)| {
            let variable = unraw(ident);
            quote!(let #local: #ty = #krate::__private::variable(&uri, &vars, #variable)?;)
        });
        let call = self.call(&locals);
        quote_spanned! {self.span=>
            .template({
                let this = Arc::clone(&self);
                #krate::__private::template(#uri, #name, #mime, move |uri: String, vars: #krate::__private::Variables, ctx: RequestContext| {
                    let this = Arc::clone(&this);
                    async move {
                        let _ = (&ctx, &uri, &vars);
                        #(#binds)*
                        let outcome = #call;
                        #krate::__private::contents(outcome, &uri, #mime)
                    }
                })
                #title
                #description
            })
        }
    }

    fn generate_prompt(&self) -> TokenStream {
        let krate = krate();
        let name = &self.name;
        let description = self.description.clone().unwrap_or_default();
        let title = self.title.as_ref().map(|t| quote!(.title(#t)));
        let locals = self.locals();
        let named = self.named();
        let mut arguments = Vec::new();
        let mut binds = Vec::new();
        for ((ident, ty, attrs), local) in named.iter().zip(&locals) {
            let argument = unraw(ident);
            let doc = doc_of(attrs).unwrap_or_default();
            let required = option_inner(ty).is_none();
            arguments.push(quote!(.argument(#argument, #doc, #required)));
            let value = quote!(args.get(#argument).and_then(|v| v.as_str()).map(::std::borrow::ToOwned::to_owned));
            binds.push(if required {
                quote!(let #local = #value.unwrap_or_default();)
            } else {
                quote!(let #local = #value;)
            });
        }
        let call = self.call(&locals);
        quote_spanned! {self.span=>
            .prompt({
                let this = Arc::clone(&self);
                #krate::__private::prompt(#name, #description, move |args: #krate::__private::JsonObject, ctx: RequestContext| {
                    let this = Arc::clone(&this);
                    async move {
                        let _ = (&ctx, &args);
                        #(#binds)*
                        #krate::__private::messages(#call)
                    }
                })
                #title
                #(#arguments)*
            })
        }
    }
}

fn param(arg: &syn::PatType) -> syn::Result<Param> {
    let ty = &*arg.ty;
    if let Some(by_ref) = context_type(ty) {
        return Ok(Param::Context { by_ref });
    }
    if let Some(inner) = generic_inner(ty, "Args") {
        return Ok(Param::Whole { ty: inner.clone() });
    }
    let Pat::Ident(pat) = &*arg.pat else {
        return Err(syn::Error::new(
            arg.pat.span(),
            "name each argument (`city: String`); for one type holding them all, take \
             `Args(args): Args<MyArgs>`",
        ));
    };
    if pat.by_ref.is_some() || pat.subpat.is_some() {
        return Err(syn::Error::new(pat.span(), "name each argument plainly"));
    }
    if let Type::Reference(r) = ty {
        return Err(syn::Error::new(
            r.span(),
            "arguments are owned values (`String`, not `&str`): they are read from the \
             request's JSON",
        ));
    }
    let attrs = arg
        .attrs
        .iter()
        .filter(|a| {
            a.path().is_ident("doc") || a.path().is_ident("serde") || a.path().is_ident("schemars")
        })
        .cloned()
        .collect();
    Ok(Param::Named {
        ident: pat.ident.clone(),
        ty: ty.clone(),
        attrs,
    })
}

/// `Some(by_ref)` when `ty` is `RequestContext` or a reference to it.
fn context_type(ty: &Type) -> Option<bool> {
    let (ty, by_ref) = match ty {
        Type::Reference(r) if r.mutability.is_none() => (&*r.elem, true),
        other => (other, false),
    };
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    (last.ident == "RequestContext" && last.arguments.is_empty()).then_some(by_ref)
}

/// `T` of `Name<T>` (by the last path segment).
fn generic_inner<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(inner) if args.args.len() == 1 => Some(inner),
        _ => None,
    }
}

fn option_inner(ty: &Type) -> Option<&Type> {
    generic_inner(ty, "Option")
}

fn is_string(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "String"))
}

/// The `{name}` variables of a URI template.
fn template_variables(uri: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = uri;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else { break };
        out.push(after[..end].trim_start_matches(['+', '#']).to_owned());
        rest = &after[end + 1..];
    }
    out
}

/// The doc comment, lines trimmed, as one text.
fn doc_of(attrs: &[Attribute]) -> Option<String> {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let text = lines.join("\n").trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn unraw(ident: &Ident) -> String {
    let text = ident.to_string();
    text.strip_prefix("r#").map(str::to_owned).unwrap_or(text)
}

fn key_of(meta: &Meta) -> syn::Result<String> {
    meta.path()
        .get_ident()
        .map(Ident::to_string)
        .ok_or_else(|| syn::Error::new(meta.span(), "expected an option name"))
}

fn unknown(meta: &Meta, word: &str, key: &str, expected: &str) -> syn::Error {
    syn::Error::new(
        meta.span(),
        format!("#[{word}] has no option `{key}`; its options: {expected}"),
    )
}

fn flag(meta: &Meta) -> syn::Result<()> {
    match meta {
        Meta::Path(_) => Ok(()),
        _ => Err(syn::Error::new(
            meta.span(),
            format!("`{}` is a flag: write it alone", key_of(meta)?),
        )),
    }
}

fn expr_value(meta: &Meta) -> syn::Result<Expr> {
    match meta {
        Meta::NameValue(nv) => Ok(nv.value.clone()),
        _ => Err(syn::Error::new(
            meta.span(),
            format!("write `{} = ...`", key_of(meta)?),
        )),
    }
}

fn string_value(meta: &Meta) -> syn::Result<LitStr> {
    match expr_value(meta)? {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) => Ok(s),
        other => Err(syn::Error::new(
            other.span(),
            format!("`{}` takes a string", key_of(meta)?),
        )),
    }
}

/// Milliseconds of `500ms`, `30s`, `2m`.
fn parse_duration(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = number.parse().ok()?;
    match unit.trim() {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" | "min" => n.checked_mul(60_000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(attr: TokenStream, item: TokenStream) -> String {
        server(attr, item).to_string()
    }

    /// The compile errors `#[server]` emits for `item`.
    fn errors(item: TokenStream) -> String {
        let out = expand(quote!(), item);
        assert!(out.contains("compile_error"), "no error: {out}");
        out
    }

    #[test]
    fn a_block_expands_to_its_methods_and_a_provider() {
        let out = expand(
            quote!(name = "calc"),
            quote! {
                impl Calc {
                    /// Adds two numbers.
                    #[tool(blocking, max_concurrent = 2, time_limit = "1500ms", scopes = ["calc:use"], read_only)]
                    async fn add(&self, /** The first. */ a: i64, b: i64, ctx: &RequestContext) -> Json<Sum> { todo!() }
                    #[resource("notes://{id}", mime_type = "text/plain")]
                    async fn note(&self, id: u32) -> String { todo!() }
                    #[prompt]
                    fn review(&self, code: String, style: Option<String>) -> String { todo!() }
                    fn helper(&self) {}
                }
            },
        );
        assert!(!out.contains("compile_error"), "{out}");
        for expected in [
            "impl :: mcp_cluster :: Provider for Calc",
            "const NAME : & 'static str = \"calc\"",
            "struct __addArgs",
            "# [doc = r\" The first. \"] a : i64",
            ". blocking ()",
            ". max_concurrent (2)",
            "Duration :: from_millis (1500u64)",
            ". scopes ([\"calc:use\"])",
            "read_only_hint",
            "this . add (__arg0 , __arg1 , & ctx) . await",
            ". template (",
            "\"notes://{id}\"",
            ". argument (\"style\" , \"\" , false)",
            ". argument (\"code\" , \"\" , true)",
            "this . review (__arg0 , __arg1)",
            "fn helper (& self) { }",
        ] {
            assert!(out.contains(expected), "{expected:?} not in {out}");
        }
        // The method attributes are consumed, the parameter docs too.
        assert!(!out.contains("# [tool"), "{out}");
        assert!(!out.contains("# [resource"), "{out}");
        assert!(!out.contains("/** The first"), "{out}");
    }

    #[test]
    fn misuse_is_named_in_the_error() {
        let cases = [
            (
                quote!(impl S { /// d
                    #[tool] async fn t(self) -> String { todo!() } }),
                "takes `&self` first",
            ),
            (
                quote!(impl S { /// d
                    #[tool] async fn t(&mut self) -> String { todo!() } }),
                "takes `&self` first",
            ),
            (
                quote!(impl S { /// d
                    #[tool] async fn t() -> String { todo!() } }),
                "takes `&self` first",
            ),
            (
                quote!(impl S { #[tool] async fn t(&self) -> String { todo!() } }),
                "a tool needs a description",
            ),
            (
                quote!(impl S { /// d
                    #[tool(blockin)] async fn t(&self) -> String { todo!() } }),
                "#[tool] has no option `blockin`",
            ),
            (
                quote!(impl S { /// d
                    #[tool(time_limit = "soon")] async fn t(&self) -> String { todo!() } }),
                "a time limit like",
            ),
            (
                quote!(impl S { /// d
                    #[tool] async fn t(&self, name: &str) -> String { todo!() } }),
                "arguments are owned values",
            ),
            (
                quote!(impl S { /// d
                    #[tool] async fn t(&self) { } }),
                "returns its result",
            ),
            (
                quote!(impl S { #[resource("notes://{id}")] async fn r(&self, key: String) -> String { todo!() } }),
                "`key` is not a variable of the URI template",
            ),
            (
                quote!(impl S { #[resource] async fn r(&self) -> String { todo!() } }),
                "needs its URI",
            ),
            (
                quote!(impl S { #[prompt] async fn p(&self, n: u32) -> String { todo!() } }),
                "prompt arguments are strings",
            ),
            (
                quote!(
                    impl<T> S<T> {}
                ),
                "does not support generic impl blocks",
            ),
            (quote!(impl Tr for S { }), "not a trait impl"),
        ];
        for (item, message) in cases {
            let out = errors(item);
            assert!(out.contains(message), "{message:?} not in {out}");
        }
    }

    #[test]
    fn durations_and_template_variables_parse() {
        assert_eq!(parse_duration("500ms"), Some(500));
        assert_eq!(parse_duration("30s"), Some(30_000));
        assert_eq!(parse_duration("2m"), Some(120_000));
        assert_eq!(parse_duration("2h"), None);
        assert_eq!(parse_duration("s"), None);
        assert_eq!(template_variables("a://{x}/b/{y}"), ["x", "y"]);
        assert!(template_variables("a://b").is_empty());
    }
}
