//! `mcp-loadtest init`: a starting scenario from what a live server offers.
//!
//! [`discover`] opens one session, lists the server's tools, resources,
//! resource templates and prompts (following `nextCursor`), and ends the
//! session; [`scenario_toml`] turns that [`Listing`] into scenario text whose
//! arguments are placeholders derived from each tool's input schema. The
//! command line and writing the file are `main.rs`'s.
//!
//! Bounds: every request waits at most [`REQUEST_TIMEOUT`]; each list is read
//! for at most [`MAX_PAGES`] pages and [`MAX_ITEMS`] items (a cut is noted in
//! the file's header); the file names at most [`MAX_RESOURCES`] resources and
//! as many templates; schemas are followed [`MAX_SCHEMA_DEPTH`] levels deep,
//! so a `$ref` cycle ends in an empty table.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context, bail};
use mcp_cluster_client::{Client, ClientError};
use serde_json::{Map, Value, json};

/// Bound on each request of the discovery (initialize, each page, DELETE).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Most pages read of one list.
const MAX_PAGES: usize = 100;
/// Most items kept of one list.
const MAX_ITEMS: usize = 10_000;
/// Most resources, and most resource templates, written to the file.
const MAX_RESOURCES: usize = 20;
/// Most tools, and most prompts, written to the file: each is an operation
/// name of its own, and a scenario has at most
/// [`crate::scenario::MAX_OPERATION_NAMES`].
const MAX_NAMED: usize = 100;
/// Most schema levels (properties, items, `$ref`, alternatives) followed.
const MAX_SCHEMA_DEPTH: usize = 8;
/// Longest title or description line in a comment, in characters.
const MAX_COMMENT_CHARS: usize = 100;
/// Longest annotations line in a comment, in characters.
const MAX_ANNOTATIONS_CHARS: usize = 200;
/// Most items of an example array (`minItems` beyond it is not met).
const MAX_EXAMPLE_ITEMS: u64 = 100;
/// Longest example string (`minLength` beyond it is not met), in characters.
const MAX_EXAMPLE_CHARS: u64 = 4096;
/// JSON-RPC "Method not found".
const METHOD_NOT_FOUND: i64 = -32601;
/// The list a server may lack even when it announces resources.
const TEMPLATES_LIST: &str = "resources/templates/list";
/// Scenario templates read this as the start of a placeholder
/// (`template.rs`), and have no escape for it.
const PLACEHOLDER_OPEN: &str = "{{";

/// What a live server offers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listing {
    /// `serverInfo.name` from `initialize` ("" if absent).
    pub(crate) server_name: String,
    /// `serverInfo.version` ("" if absent).
    pub(crate) server_version: String,
    /// The negotiated `protocolVersion` of the initialize result.
    pub(crate) protocol_version: String,
    /// `tools/list` items, all pages.
    pub(crate) tools: Vec<Value>,
    /// `resources/list` items, all pages.
    pub(crate) resources: Vec<Value>,
    /// `resources/templates/list` items, all pages.
    pub(crate) resource_templates: Vec<Value>,
    /// `prompts/list` items, all pages.
    pub(crate) prompts: Vec<Value>,
    /// Lists cut at [`MAX_PAGES`] or [`MAX_ITEMS`], one sentence each; the
    /// file's header repeats them.
    pub(crate) truncated: Vec<String>,
}

/// Opens a session on `url` with `http` (TLS and auth already configured),
/// lists everything the server announces, and DELETEs the session.
///
/// Lists are read only for the capabilities the initialize result
/// announces (`resources` covers both resource lists).
///
/// # Errors
/// `initialize` or a list request failing, timing out, or answering with a
/// JSON-RPC error (except "Method not found" on `resources/templates/list`,
/// which counts as no templates). The DELETE's outcome is ignored.
pub(crate) async fn discover(
    http: &reqwest::Client,
    url: &str,
    protocol_version: &str,
) -> anyhow::Result<Listing> {
    let mut client = Client::with_http(http.clone(), url, protocol_version);
    let listing = list_everything(&mut client, url, protocol_version).await;
    // Also after a failure: initialize may have opened the session before
    // its `initialized` notification failed.
    if client.session_id().is_some() {
        // Best effort: a server that refuses the DELETE lets the session expire.
        let _ignored = bounded(client.delete()).await;
    }
    listing
}

/// `initialize`, then each announced list.
async fn list_everything(
    client: &mut Client,
    url: &str,
    protocol_version: &str,
) -> anyhow::Result<Listing> {
    let result = bounded(client.initialize(json!({})))
        .await
        .with_context(|| format!("initialize on {url}"))?;
    let text = |pointer: &str| {
        result
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut listing = Listing {
        server_name: text("/serverInfo/name"),
        server_version: text("/serverInfo/version"),
        protocol_version: text("/protocolVersion"),
        ..Listing::default()
    };
    if listing.protocol_version.is_empty() {
        protocol_version.clone_into(&mut listing.protocol_version);
    }
    let announced = |name: &str| {
        result
            .get("capabilities")
            .and_then(|capabilities| capabilities.get(name))
            .is_some_and(|capability| !capability.is_null())
    };
    let cut = &mut listing.truncated;
    if announced("tools") {
        listing.tools = list(client, url, "tools/list", "tools", cut).await?;
    }
    if announced("resources") {
        listing.resources = list(client, url, "resources/list", "resources", cut).await?;
        listing.resource_templates =
            list(client, url, TEMPLATES_LIST, "resourceTemplates", cut).await?;
    }
    if announced("prompts") {
        listing.prompts = list(client, url, "prompts/list", "prompts", cut).await?;
    }
    Ok(listing)
}

/// Every item of one list (the result's array `key`), page by page; a cut
/// at [`MAX_PAGES`] or [`MAX_ITEMS`] is added to `truncated`.
async fn list(
    client: &Client,
    url: &str,
    method: &str,
    key: &str,
    truncated: &mut Vec<String>,
) -> anyhow::Result<Vec<Value>> {
    let mut items = Vec::new();
    let mut params = json!({});
    for _ in 0..MAX_PAGES {
        let (response, _notifications) = bounded(client.request(method, params))
            .await
            .with_context(|| format!("{method} on {url}"))?;
        let Some(page) = read_page(url, method, key, response)? else {
            return Ok(items);
        };
        let room = MAX_ITEMS - items.len();
        if page.items.len() > room {
            items.extend(page.items.into_iter().take(room));
            truncated.push(format!("{method}: stopped at {MAX_ITEMS} items"));
            return Ok(items);
        }
        items.extend(page.items);
        match page.next_cursor {
            Some(cursor) => params = json!({ "cursor": cursor }),
            None => return Ok(items),
        }
    }
    truncated.push(format!("{method}: stopped after {MAX_PAGES} pages"));
    Ok(items)
}

/// One page of a list.
#[derive(Debug)]
struct Page {
    items: Vec<Value>,
    next_cursor: Option<String>,
}

/// The page a list `response` carries; `None` for "Method not found" on
/// `resources/templates/list` (a server without templates may not know it).
///
/// # Errors
/// A JSON-RPC error (named with its method, code and message), or a result
/// without the `key` array.
fn read_page(
    url: &str,
    method: &str,
    key: &str,
    mut response: Value,
) -> anyhow::Result<Option<Page>> {
    if let Some(error) = response.get("error") {
        let code = error.get("code").and_then(Value::as_i64);
        if method == TEMPLATES_LIST && code == Some(METHOD_NOT_FOUND) {
            return Ok(None);
        }
        let code = code.map_or_else(
            || "an error without a code".to_owned(),
            |code| format!("error {code}"),
        );
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        bail!("{method} on {url}: the server answered with {code}: {message}");
    }
    let Some(result) = response.get_mut("result") else {
        bail!("{method} on {url}: the answer has neither a result nor an error");
    };
    let next_cursor = result
        .get("nextCursor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(Value::Array(items)) = result.get_mut(key).map(Value::take) else {
        bail!("{method} on {url}: the result has no {key} array");
    };
    Ok(Some(Page { items, next_cursor }))
}

/// `step` within [`REQUEST_TIMEOUT`].
async fn bounded<T>(step: impl Future<Output = Result<T, ClientError>>) -> anyhow::Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, step).await {
        Ok(outcome) => Ok(outcome?),
        Err(_elapsed) => bail!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
    }
}

/// The starting scenario file (TOML text) for `listing`, discovered at `url`.
///
/// Every value is a placeholder: tool arguments come from the input schema
/// (see [`Examples`]), calls of tools not marked read-only and reads of
/// templates have weight 0, and no operation has checks.
pub(crate) fn scenario_toml(listing: &Listing, url: &str) -> String {
    let mut out = String::new();
    let name = if listing.server_name.is_empty() {
        "server"
    } else {
        &listing.server_name
    };
    let server: Vec<&str> = [name, listing.server_version.as_str()]
        .into_iter()
        .filter(|part| !part.is_empty())
        .collect();
    comment(
        &mut out,
        &format!(
            "Generated by `mcp-loadtest init` from {} (server {}, protocol {}).",
            comment_text(&shown_url(url), usize::MAX),
            comment_text(&server.join(" "), MAX_COMMENT_CHARS),
            comment_text(&listing.protocol_version, MAX_COMMENT_CHARS),
        ),
        usize::MAX,
    );
    comment(
        &mut out,
        "Review before running: every value below is a placeholder derived from the schema.",
        usize::MAX,
    );
    for note in &listing.truncated {
        comment(
            &mut out,
            &format!("Cut: {note}; the rest is not listed here."),
            usize::MAX,
        );
    }
    field(&mut out, "name", name);
    if !listing.protocol_version.is_empty() {
        field(
            &mut out,
            "protocol_version",
            listing.protocol_version.as_str(),
        );
    }
    field(&mut out, "think_time_ms", 0);
    field(&mut out, "thresholds", vec![toml::Value::from("errors<1%")]);

    let lists = [
        ("tools", &listing.tools),
        ("resources", &listing.resources),
        ("resource_templates", &listing.resource_templates),
        ("prompts", &listing.prompts),
    ];
    let nothing = lists.iter().all(|(_, items)| items.is_empty());
    for (what, items) in lists {
        // With nothing listed, tools/list still gives the file one
        // operation with a weight (a scenario needs one).
        if !items.is_empty() || (nothing && what == "tools") {
            operation(&mut out, &[]);
            field(&mut out, "kind", "list");
            field(&mut out, "what", what);
            field(&mut out, "weight", 1);
        }
    }
    let mut example_check = true;
    for tool in listing.tools.iter().take(MAX_NAMED) {
        if write_tool(&mut out, tool) && example_check {
            example_check = false;
            out.push_str(
                "# [[operation.check]]\n# pointer = \"/content/0/text\"\n# contains = \"...\"\n",
            );
        }
    }
    write_resources(&mut out, &listing.resources);
    write_templates(&mut out, &listing.resource_templates);
    left_out_of(&mut out, listing.tools.len(), MAX_NAMED, "tools");
    for prompt in listing.prompts.iter().take(MAX_NAMED) {
        write_prompt(&mut out, prompt);
    }
    left_out_of(&mut out, listing.prompts.len(), MAX_NAMED, "prompts");
    out
}

/// One `call_tool` operation; false if the tool was left out.
fn write_tool(out: &mut String, tool: &Value) -> bool {
    let Some(name) = usable_name(out, tool, "tool") else {
        return false;
    };
    let mut comments = Vec::new();
    let annotations = tool.get("annotations").and_then(Value::as_object);
    let title = tool
        .get("title")
        .or_else(|| annotations.and_then(|a| a.get("title")))
        .and_then(Value::as_str);
    comments.extend(title.map(|title| comment_text(title, MAX_COMMENT_CHARS)));
    if let Some(description) = tool.get("description").and_then(Value::as_str) {
        comments.push(comment_text(description, MAX_COMMENT_CHARS));
    }
    if let Some(annotations) = annotations {
        let hints: Vec<String> = annotations
            .iter()
            .filter(|(key, _)| *key != "title")
            .map(|(key, value)| format!("{key} = {value}"))
            .collect();
        if !hints.is_empty() {
            let line = format!("annotations: {}", hints.join(", "));
            comments.push(comment_text(&line, MAX_ANNOTATIONS_CHARS));
        }
    }
    if tool.get("outputSchema").is_some() {
        comments.push(
            "It declares an outputSchema: a check could assert on /structuredContent.".to_owned(),
        );
    }
    let read_only = annotations
        .and_then(|a| a.get("readOnlyHint"))
        .and_then(Value::as_bool)
        == Some(true);
    if !read_only {
        comments.push(
            "weight 0: this tool may change the server's state (readOnlyHint is not true); \
             review its arguments before giving it a weight"
                .to_owned(),
        );
    }
    let arguments = tool
        .get("inputSchema")
        .map_or_else(toml::Table::new, |schema| {
            match (Examples { root: schema }).value(schema, 0) {
                Some(toml::Value::Table(arguments)) => arguments,
                _ => toml::Table::new(),
            }
        });
    operation(out, &comments);
    field(out, "kind", "call_tool");
    field(out, "tool", name);
    field(out, "weight", i64::from(read_only));
    field(out, "arguments", arguments);
    true
}

/// Up to [`MAX_RESOURCES`] `read_resource` operations.
fn write_resources(out: &mut String, resources: &[Value]) {
    for resource in resources.iter().take(MAX_RESOURCES) {
        let uri = resource.get("uri").and_then(Value::as_str);
        let Some(uri) = usable_uri(out, uri, "resource") else {
            continue;
        };
        let mut comments = Vec::new();
        if let Some(name) = resource.get("name").and_then(Value::as_str) {
            comments.push(comment_text(name, MAX_COMMENT_CHARS));
        }
        operation(out, &comments);
        field(out, "kind", "read_resource");
        field(out, "uri", uri);
        field(out, "weight", 1);
    }
    left_out(out, resources.len(), "resources");
}

/// Up to [`MAX_RESOURCES`] `read_resource` operations on templates, their
/// variables set to `example`.
fn write_templates(out: &mut String, templates: &[Value]) {
    for template in templates.iter().take(MAX_RESOURCES) {
        let source = template.get("uriTemplate").and_then(Value::as_str);
        let expanded = source.map(expand_uri_template);
        let Some(uri) = usable_uri(out, expanded.as_deref(), "resource template") else {
            continue;
        };
        let mut comments = Vec::new();
        if let Some(source) = source {
            comments.push(comment_text(
                &format!("template {source}"),
                MAX_COMMENT_CHARS,
            ));
        }
        comments.push("weight 0: fill in the template's variables".to_owned());
        operation(out, &comments);
        field(out, "kind", "read_resource");
        field(out, "uri", uri);
        field(out, "weight", 0);
    }
    left_out(out, templates.len(), "resource templates");
}

/// One `get_prompt` operation, its required arguments set to `example`.
fn write_prompt(out: &mut String, prompt: &Value) {
    let Some(name) = usable_name(out, prompt, "prompt") else {
        return;
    };
    let mut arguments = toml::Table::new();
    for argument in prompt
        .get("arguments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let required = argument.get("required").and_then(Value::as_bool) == Some(true);
        if let (true, Some(key)) = (required, argument.get("name").and_then(Value::as_str)) {
            arguments.insert(key.to_owned(), "example".into());
        }
    }
    let mut comments = Vec::new();
    if let Some(description) = prompt.get("description").and_then(Value::as_str) {
        comments.push(comment_text(description, MAX_COMMENT_CHARS));
    }
    operation(out, &comments);
    field(out, "kind", "get_prompt");
    field(out, "prompt", name);
    field(out, "weight", 1);
    field(out, "arguments", arguments);
}

/// The item's `name`, or `None` (with a comment) when there is none or a
/// scenario could not carry it.
fn usable_name<'a>(out: &mut String, item: &'a Value, what: &str) -> Option<&'a str> {
    let Some(name) = item.get("name").and_then(Value::as_str) else {
        out.push('\n');
        comment(
            out,
            &format!("Left out: a {what} without a name."),
            usize::MAX,
        );
        return None;
    };
    if name.contains(PLACEHOLDER_OPEN) {
        out.push('\n');
        comment(
            out,
            &format!(
                "Left out: {what} {name}, whose name has {{{{, which scenarios read as a placeholder."
            ),
            MAX_ANNOTATIONS_CHARS,
        );
        return None;
    }
    Some(name)
}

/// A URI a scenario can carry, or `None` (with a comment).
fn usable_uri<'a>(out: &mut String, uri: Option<&'a str>, what: &str) -> Option<&'a str> {
    let Some(uri) = uri else {
        out.push('\n');
        comment(
            out,
            &format!("Left out: a {what} without a URI."),
            usize::MAX,
        );
        return None;
    };
    if uri.contains(PLACEHOLDER_OPEN) {
        out.push('\n');
        comment(
            out,
            &format!(
                "Left out: {what} {uri}, which has {{{{, which scenarios read as a placeholder."
            ),
            MAX_ANNOTATIONS_CHARS,
        );
        return None;
    }
    Some(uri)
}

/// A comment saying how many of `total` items are beyond [`MAX_RESOURCES`].
fn left_out(out: &mut String, total: usize, what: &str) {
    left_out_of(out, total, MAX_RESOURCES, what);
}

/// A comment saying how many of `total` items are beyond `max`.
fn left_out_of(out: &mut String, total: usize, max: usize, what: &str) {
    if total > max {
        out.push('\n');
        comment(
            out,
            &format!(
                "{} more {what} left out (at most {max} are written).",
                total - max
            ),
            usize::MAX,
        );
    }
}

/// Starts an `[[operation]]` entry, its comments above it.
fn operation(out: &mut String, comments: &[String]) {
    out.push('\n');
    for text in comments {
        comment(out, text, usize::MAX);
    }
    out.push_str("[[operation]]\n");
}

/// `key = value`; `key` is a bare key, the value is written by `toml`, so
/// quoting and escaping are its.
fn field(out: &mut String, key: &str, value: impl Into<toml::Value>) {
    out.push_str(key);
    out.push_str(" = ");
    out.push_str(&value.into().to_string());
    out.push('\n');
}

/// One comment line.
fn comment(out: &mut String, text: &str, max_chars: usize) {
    out.push_str("# ");
    out.push_str(&comment_text(text, max_chars));
    out.push('\n');
}

/// `text` fit for one comment line: its first non-blank line, control
/// characters (which TOML forbids in comments) made spaces, trimmed, at
/// most `max_chars` characters (the last an ellipsis when cut).
fn comment_text(text: &str, max_chars: usize) -> String {
    let line = text
        .split(['\n', '\r'])
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default();
    let line: String = line
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.chars().count() <= max_chars {
        return line;
    }
    let mut cut: String = line.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `url` for the header: without user info, and the query (which may hold
/// a key) replaced by `...`.
fn shown_url(url: &str) -> String {
    let Ok(mut parsed) = reqwest::Url::parse(url) else {
        return url.to_owned();
    };
    // Errors here mean the URL cannot have user info; nothing to remove.
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    if parsed.query().is_some() {
        parsed.set_query(Some("..."));
    }
    parsed.to_string()
}

/// `template` with every expression expanded as if each variable were
/// `example` (RFC 6570 section 3.2: the operator picks the prefix, the
/// separator and whether names are written, `{?q}` gives `?q=example`).
/// An unclosed `{` and what follows it are kept as they are.
fn expand_uri_template(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(length) = rest[open..].find('}') else {
            break;
        };
        out.push_str(&rest[..open]);
        let expression = &rest[open + 1..open + length];
        let (prefix, separator, named, variables) = match expression.chars().next() {
            Some('+') => ("", ",", false, &expression[1..]),
            Some('#') => ("#", ",", false, &expression[1..]),
            Some('.') => (".", ".", false, &expression[1..]),
            Some('/') => ("/", "/", false, &expression[1..]),
            Some(';') => (";", ";", true, &expression[1..]),
            Some('?') => ("?", "&", true, &expression[1..]),
            Some('&') => ("&", "&", true, &expression[1..]),
            _ => ("", ",", false, expression),
        };
        let values: Vec<String> = variables
            .split(',')
            .map(|variable| {
                // Modifiers: `var*` (explode) and `var:3` (prefix).
                let name = variable
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches('*');
                if named {
                    format!("{name}=example")
                } else {
                    "example".to_owned()
                }
            })
            .collect();
        out.push_str(prefix);
        out.push_str(&values.join(separator));
        rest = &rest[open + length + 1..];
    }
    out.push_str(rest);
    out
}

/// Example values from a JSON Schema (a tool's `inputSchema`).
///
/// Per schema: `default`, else the first of `examples`, else the first of
/// `enum`, else `const`; else `$ref` (local, resolved within [`Self::root`]);
/// else the first alternative of `anyOf` / `oneOf` / `allOf` (without
/// `type`); else by type. Objects get their required properties and the
/// optional ones with a `default` or `examples`. `None` means the only
/// example would be null, which TOML cannot write: such a property is left
/// out. Strings with `{{` are not taken from the schema (scenarios would
/// read them as placeholders).
#[derive(Debug, Clone, Copy)]
struct Examples<'a> {
    /// The whole schema, which `$ref`s point into.
    root: &'a Value,
}

/// The schema that allows anything (JSON Schema `true`).
static ANY_SCHEMA: Value = Value::Bool(true);

impl<'a> Examples<'a> {
    /// An example of `schema`, `depth` levels below the root.
    fn value(self, schema: &Value, depth: usize) -> Option<toml::Value> {
        if depth > MAX_SCHEMA_DEPTH {
            return Some(toml::Table::new().into());
        }
        let schema = match schema {
            Value::Object(schema) => schema,
            Value::Bool(false) => return None,
            _ => return Some("example".into()),
        };
        if let Some(value) = given(schema) {
            return Some(value);
        }
        if let Some(target) = schema.get("$ref").and_then(Value::as_str)
            && let Some(resolved) = self.resolve(target)
        {
            return self.value(resolved, depth + 1);
        }
        if schema.get("type").is_none() {
            for key in ["anyOf", "oneOf", "allOf"] {
                if let Some(alternatives) = schema.get(key).and_then(Value::as_array) {
                    return alternatives.iter().find_map(|a| self.value(a, depth + 1));
                }
            }
        }
        let kind = match schema.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            Some(Value::Array(kinds)) => {
                let mut kinds = kinds.iter().filter_map(Value::as_str);
                kinds.find(|kind| *kind != "null")?
            }
            _ if schema.contains_key("properties") => "object",
            _ if schema.contains_key("items") || schema.contains_key("prefixItems") => "array",
            _ => "string",
        };
        match kind {
            "null" => None,
            "boolean" => Some(false.into()),
            "integer" => Some(integer(schema).into()),
            "number" => Some(number(schema).into()),
            "array" => Some(self.array(schema, depth).into()),
            "object" => Some(self.object(schema, depth).into()),
            _ => Some(string(schema).into()),
        }
    }

    /// An object's required properties, and its optional ones that have a
    /// `default` or `examples`.
    fn object(self, schema: &Map<String, Value>, depth: usize) -> toml::Table {
        let mut table = toml::Table::new();
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return table;
        };
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, property) in properties {
            let value = if required.contains(&name.as_str()) {
                self.value(property, depth + 1)
            } else {
                property.as_object().and_then(given)
            };
            if let Some(value) = value {
                table.insert(name.clone(), value);
            }
        }
        table
    }

    /// `minItems` example items (none by default).
    fn array(self, schema: &Map<String, Value>, depth: usize) -> Vec<toml::Value> {
        let count = schema
            .get("minItems")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(MAX_EXAMPLE_ITEMS);
        let prefix = schema.get("prefixItems").and_then(Value::as_array);
        let mut items = Vec::new();
        for index in 0..count {
            let index = usize::try_from(index).unwrap_or(usize::MAX);
            let item = match (prefix.and_then(|p| p.get(index)), schema.get("items")) {
                (Some(item), _) => item,
                // Draft 4 tuples: `items` as an array.
                (None, Some(Value::Array(tuple))) => tuple.get(index).unwrap_or(&ANY_SCHEMA),
                (None, Some(item)) => item,
                (None, None) => &ANY_SCHEMA,
            };
            match self.value(item, depth + 1) {
                Some(value) => items.push(value),
                None => break,
            }
        }
        items
    }

    /// The schema a local `$ref` (`#/$defs/X`, `#/definitions/X`, any JSON
    /// pointer into the root) names.
    fn resolve(self, target: &str) -> Option<&'a Value> {
        self.root.pointer(target.strip_prefix('#')?)
    }
}

/// The schema's own example: `default`, the first of `examples`, the first
/// of `enum`, or `const`, whichever first TOML can write.
fn given(schema: &Map<String, Value>) -> Option<toml::Value> {
    let first = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|values| values.iter().find_map(to_toml))
    };
    schema
        .get("default")
        .and_then(to_toml)
        .or_else(|| first("examples"))
        .or_else(|| first("enum"))
        .or_else(|| schema.get("const").and_then(to_toml))
}

/// `value` as TOML; `None` for null, for an array holding something TOML
/// cannot write, and for strings with `{{`. Null members of objects are
/// dropped.
fn to_toml(value: &Value) -> Option<toml::Value> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64()?.into(),
        },
        Value::String(s) if s.contains(PLACEHOLDER_OPEN) => return None,
        Value::String(s) => s.as_str().into(),
        Value::Array(items) => items
            .iter()
            .map(to_toml)
            .collect::<Option<Vec<_>>>()?
            .into(),
        Value::Object(members) => {
            let mut table = toml::Table::new();
            for (key, member) in members {
                if member.is_null() {
                    continue;
                }
                table.insert(key.clone(), to_toml(member)?);
            }
            table.into()
        }
    })
}

/// A string by `format`, padded with `x` to `minLength`, cut to `maxLength`
/// when it has no format.
fn string(schema: &Map<String, Value>) -> String {
    let format = schema.get("format").and_then(Value::as_str);
    let mut text = match format {
        Some("uri" | "url" | "iri" | "uri-reference") => "https://example.com",
        Some("date") => "2026-01-01",
        Some("date-time") => "2026-01-01T00:00:00Z",
        Some("email") => "user@example.com",
        Some("uuid") => "00000000-0000-4000-8000-000000000000",
        _ => "example",
    }
    .to_owned();
    let length = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_u64)
            .map(|n| usize::try_from(n.min(MAX_EXAMPLE_CHARS)).unwrap_or(usize::MAX))
    };
    if let Some(min) = length("minLength") {
        let missing = min.saturating_sub(text.chars().count());
        text.extend(std::iter::repeat_n('x', missing));
    }
    if let (None, Some(max)) = (format, length("maxLength"))
        && text.chars().count() > max
    {
        text = text
            .chars()
            .take(max.max(length("minLength").unwrap_or(0)))
            .collect();
    }
    text
}

/// A bound of a numeric schema.
#[derive(Debug, Clone, Copy)]
struct Bound {
    value: f64,
    /// The value itself is not allowed.
    exclusive: bool,
}

/// The lower and upper bound of a numeric schema, the tighter one where
/// both an inclusive and an exclusive are given (`exclusiveMinimum` as a
/// number, or as draft 4's boolean beside `minimum`).
fn bounds(schema: &Map<String, Value>) -> (Option<Bound>, Option<Bound>) {
    let number = |key: &str| schema.get(key).and_then(Value::as_f64);
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    let bound = |value, exclusive| Some(Bound { value, exclusive });
    let low = match (number("minimum"), number("exclusiveMinimum")) {
        (Some(min), Some(exclusive)) if exclusive >= min => bound(exclusive, true),
        (Some(min), _) => bound(min, flag("exclusiveMinimum")),
        (None, exclusive) => exclusive.and_then(|value| bound(value, true)),
    };
    let high = match (number("maximum"), number("exclusiveMaximum")) {
        (Some(max), Some(exclusive)) if exclusive <= max => bound(exclusive, true),
        (Some(max), _) => bound(max, flag("exclusiveMaximum")),
        (None, exclusive) => exclusive.and_then(|value| bound(value, true)),
    };
    (low, high)
}

/// The lowest allowed integer, 1 without a lower bound, within the upper one.
fn integer(schema: &Map<String, Value>) -> i64 {
    let (low, high) = bounds(schema);
    let mut value = low.map_or(1.0, |low| {
        if low.exclusive {
            low.value.floor() + 1.0
        } else {
            low.value.ceil()
        }
    });
    if let Some(high) = high {
        let highest = if high.exclusive {
            high.value.ceil() - 1.0
        } else {
            high.value.floor()
        };
        value = value.min(highest);
    }
    // `as` saturates: an absurd bound gives i64::MIN or MAX, still a placeholder.
    value as i64
}

/// The lower bound (an exclusive one plus 1), 1.0 without one, within the
/// upper bound (halfway to an exclusive one).
fn number(schema: &Map<String, Value>) -> f64 {
    let (low, high) = bounds(schema);
    let mut value = low.map_or(1.0, |low| {
        if low.exclusive {
            low.value + 1.0
        } else {
            low.value
        }
    });
    match high {
        Some(high) if !high.exclusive && value > high.value => value = high.value,
        Some(high) if high.exclusive && value >= high.value => {
            value = low.map_or(high.value - 1.0, |low| (low.value + high.value) / 2.0);
        }
        _ => {}
    }
    value
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A schema with every construct the examples follow.
    fn search_schema() -> Value {
        serde_json::from_str(
            r##"{
            "type": "object",
            "$defs": {
                "Filter": {
                    "type": "object",
                    "properties": {
                        "field": {"type": "string", "enum": ["title", "author"]},
                        "since": {"type": "string", "format": "date"}
                    },
                    "required": ["field", "since"]
                },
                "Node": {
                    "type": "object",
                    "properties": {"child": {"$ref": "#/$defs/Node"}},
                    "required": ["child"]
                }
            },
            "properties": {
                "query": {"type": "string", "minLength": 10},
                "code": {"type": "string", "maxLength": 3},
                "limit": {"type": "integer", "minimum": 5, "maximum": 50},
                "below": {"type": "integer", "exclusiveMaximum": 0},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "exact": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "version": {"const": 2},
                "page": {"type": "integer", "default": 3},
                "lang": {"type": "string", "examples": ["fr", "de"]},
                "unused": {"type": "string"},
                "site": {"type": "string", "format": "uri"},
                "when": {"type": "string", "format": "date-time"},
                "mail": {"type": "string", "format": "email"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "pair": {"type": "array", "minItems": 2, "items": {"type": "integer"}},
                "filter": {"$ref": "#/$defs/Filter"},
                "tree": {"$ref": "#/$defs/Node"},
                "maybe": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 7}]},
                "either": {"oneOf": [{"type": "boolean"}, {"type": "string"}]},
                "nullable": {"type": ["null", "number"]},
                "nothing": {"type": "null"},
                "brace": {"type": "string", "default": "{{seq}}"},
                "odd key": {"type": "string"},
                "nested": {
                    "type": "object",
                    "properties": {
                        "inner": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/Filter"}}
                    },
                    "required": ["inner"]
                }
            },
            "required": [
                "query", "code", "limit", "below", "ratio", "exact", "mode", "version",
                "site", "when", "mail", "tags", "pair", "filter", "tree", "maybe",
                "either", "nullable", "nothing", "brace", "odd key", "nested"
            ]
        }"##,
        )
        .unwrap()
    }

    fn listing() -> Listing {
        Listing {
            server_name: "demo \"server\"".to_owned(),
            server_version: "1.2.3".to_owned(),
            protocol_version: "2025-11-25".to_owned(),
            tools: vec![
                json!({
                    "name": "search",
                    "title": "Search the catalogue",
                    "description": "Finds items.\nSecond line # not in the comment",
                    "annotations": {"readOnlyHint": true, "openWorldHint": false},
                    "outputSchema": {"type": "object"},
                    "inputSchema": search_schema(),
                }),
                json!({
                    "name": "say \"hi\"",
                    "description": "\n  Writes a note.\r\nThen more.",
                    "annotations": {"readOnlyHint": false, "destructiveHint": true},
                    "inputSchema": {"type": "object"}
                }),
                json!({"name": "{{seq}}", "inputSchema": {"type": "object"}}),
            ],
            resources: (0..25)
                .map(|n| json!({"uri": format!("file:///r{n}.txt"), "name": format!("r{n}")}))
                .collect(),
            resource_templates: vec![
                json!({"uriTemplate": "file:///{path}/{+rest}{?q,lang}{#frag}", "name": "files"}),
            ],
            prompts: vec![json!({
                "name": "summary",
                "description": "Summarizes.",
                "arguments": [
                    {"name": "topic", "required": true},
                    {"name": "style", "required": false},
                    {"name": "the length", "required": true}
                ]
            })],
            truncated: vec!["tools/list: stopped after 100 pages".to_owned()],
        }
    }

    fn operations(table: &toml::Table) -> Vec<&toml::Table> {
        table["operation"]
            .as_array()
            .unwrap()
            .iter()
            .map(|op| op.as_table().unwrap())
            .collect()
    }

    fn find<'a>(ops: &[&'a toml::Table], key: &str, value: &str) -> &'a toml::Table {
        ops.iter()
            .find(|op| op.get(key).and_then(toml::Value::as_str) == Some(value))
            .unwrap_or_else(|| panic!("no operation with {key} = {value:?}"))
    }

    #[test]
    fn scenario_has_header_top_level_fields_and_lists() {
        let text = scenario_toml(&listing(), "http://user:secret@127.0.0.1:1/mcp?key=abc");
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(
                "# Generated by `mcp-loadtest init` from http://127.0.0.1:1/mcp?... \
                 (server demo \"server\" 1.2.3, protocol 2025-11-25)."
            )
        );
        assert_eq!(
            lines.next(),
            Some(
                "# Review before running: every value below is a placeholder derived from the schema."
            )
        );
        assert!(text.contains("# Cut: tools/list: stopped after 100 pages"));
        assert!(!text.contains("secret") && !text.contains("abc"));

        let table: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(table["name"].as_str(), Some("demo \"server\""));
        assert_eq!(table["protocol_version"].as_str(), Some("2025-11-25"));
        assert_eq!(table["think_time_ms"].as_integer(), Some(0));
        assert_eq!(
            table["thresholds"],
            toml::Value::Array(vec!["errors<1%".into()])
        );
        let ops = operations(&table);
        let lists: Vec<(&str, i64)> = ops
            .iter()
            .filter(|op| op["kind"].as_str() == Some("list"))
            .map(|op| {
                (
                    op["what"].as_str().unwrap(),
                    op["weight"].as_integer().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            lists,
            [
                ("tools", 1),
                ("resources", 1),
                ("resource_templates", 1),
                ("prompts", 1)
            ]
        );
    }

    #[test]
    fn tool_arguments_come_from_the_input_schema() {
        let table: toml::Table =
            toml::from_str(&scenario_toml(&listing(), "http://h/mcp")).unwrap();
        let ops = operations(&table);
        let search = find(&ops, "tool", "search");
        assert_eq!(search["kind"].as_str(), Some("call_tool"));
        assert_eq!(search["weight"].as_integer(), Some(1));
        let expected: toml::Table = toml::from_str(
            r#"
            query = "examplexxx"
            code = "exa"
            limit = 5
            below = -1
            ratio = 0.5
            exact = false
            mode = "fast"
            version = 2
            page = 3
            lang = "fr"
            site = "https://example.com"
            when = "2026-01-01T00:00:00Z"
            mail = "user@example.com"
            tags = []
            pair = [1, 1]
            filter = { field = "title", since = "2026-01-01" }
            tree = { child = { child = { child = { child = {} } } } }
            maybe = 7
            either = false
            nullable = 1.0
            brace = "example"
            "odd key" = "example"
            nested = { inner = [{ field = "title", since = "2026-01-01" }] }
            "#,
        )
        .unwrap();
        assert_eq!(search["arguments"].as_table().unwrap(), &expected);
    }

    #[test]
    fn weights_follow_read_only_and_comments_stay_comments() {
        let text = scenario_toml(&listing(), "http://h/mcp");
        let table: toml::Table = toml::from_str(&text).unwrap();
        let ops = operations(&table);
        let note = find(&ops, "tool", "say \"hi\"");
        assert_eq!(note["weight"].as_integer(), Some(0));
        assert_eq!(note["arguments"].as_table().map(toml::Table::len), Some(0));
        // The first non-blank line of the description; annotations as JSON.
        let comments = "# Writes a note.\n\
            # annotations: destructiveHint = true, readOnlyHint = false\n\
            # weight 0: this tool may change the server's state (readOnlyHint is not true); \
            review its arguments before giving it a weight\n\
            [[operation]]\n\
            kind = \"call_tool\"\n\
            tool = 'say \"hi\"'\n";
        assert!(text.contains(comments), "{text}");
        assert!(text.contains("# Search the catalogue\n# Finds items.\n"));
        assert!(!text.contains("Second line"));
        assert!(text.contains("a check could assert on /structuredContent"));
        // The example check comes once, after the first call_tool.
        assert_eq!(text.matches("# [[operation.check]]").count(), 1);
        let check = text.find("# [[operation.check]]").unwrap();
        assert!(text.find("tool = \"search\"").unwrap() < check);
        assert!(check < text.find("tool = 'say").unwrap());
        // A name with `{{` is left out with a comment.
        assert!(text.contains("# Left out: tool {{seq}}"));
        assert!(
            ops.iter()
                .all(|op| op.get("tool").and_then(toml::Value::as_str) != Some("{{seq}}"))
        );
    }

    #[test]
    fn resources_templates_and_prompts() {
        let text = scenario_toml(&listing(), "http://h/mcp");
        let table: toml::Table = toml::from_str(&text).unwrap();
        let ops = operations(&table);
        let reads: Vec<(&str, i64)> = ops
            .iter()
            .filter(|op| op["kind"].as_str() == Some("read_resource"))
            .map(|op| {
                (
                    op["uri"].as_str().unwrap(),
                    op["weight"].as_integer().unwrap(),
                )
            })
            .collect();
        assert_eq!(reads.len(), MAX_RESOURCES + 1);
        assert_eq!(reads[0], ("file:///r0.txt", 1));
        assert_eq!(reads[19], ("file:///r19.txt", 1));
        assert_eq!(
            reads[20],
            ("file:///example/example?q=example&lang=example#example", 0)
        );
        assert!(text.contains("# 5 more resources left out (at most 20 are written)."));
        assert!(text.contains("# weight 0: fill in the template's variables\n[[operation]]"));
        let prompt = find(&ops, "prompt", "summary");
        assert_eq!(prompt["kind"].as_str(), Some("get_prompt"));
        assert_eq!(prompt["weight"].as_integer(), Some(1));
        let expected: toml::Table =
            toml::from_str("topic = \"example\"\n\"the length\" = \"example\"").unwrap();
        assert_eq!(prompt["arguments"].as_table().unwrap(), &expected);
    }

    #[test]
    fn the_scenario_loads() {
        let text = scenario_toml(&listing(), "http://h/mcp");
        crate::scenario::Scenario::parse(&text, Path::new(".")).unwrap();
        let empty = scenario_toml(&Listing::default(), "http://h/mcp");
        let table: toml::Table = toml::from_str(&empty).unwrap();
        assert_eq!(table["name"].as_str(), Some("server"));
        crate::scenario::Scenario::parse(&empty, Path::new(".")).unwrap();
    }

    #[test]
    fn comment_text_is_one_bounded_line() {
        assert_eq!(
            comment_text("\n\n  first \t line \r\nsecond", 100),
            "first   line"
        );
        assert_eq!(comment_text("a\u{7}b", 100), "a b");
        let long = "é".repeat(150);
        let cut = comment_text(&long, 100);
        assert_eq!(cut.chars().count(), 100);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn uri_templates_expand_every_operator() {
        assert_eq!(expand_uri_template("file:///{path}"), "file:///example");
        assert_eq!(
            expand_uri_template("x{/a,b}{.ext}{;p}{&q*}/{+r:3}"),
            "x/example/example.example;p=example&q=example/example"
        );
        assert_eq!(expand_uri_template("x{unclosed"), "x{unclosed");
    }

    #[test]
    fn list_pages_and_errors() {
        let page = read_page(
            "http://h",
            "tools/list",
            "tools",
            json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "a"}], "nextCursor": "c2"}}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(page.items, [json!({"name": "a"})]);
        assert_eq!(page.next_cursor.as_deref(), Some("c2"));

        let not_found = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "Method not found"}});
        assert!(
            read_page(
                "http://h",
                TEMPLATES_LIST,
                "resourceTemplates",
                not_found.clone()
            )
            .unwrap()
            .is_none()
        );
        let err = read_page("http://h", "prompts/list", "prompts", not_found).unwrap_err();
        assert_eq!(
            err.to_string(),
            "prompts/list on http://h: the server answered with error -32601: Method not found"
        );
        let err = read_page("http://h", "tools/list", "tools", json!({"result": {}})).unwrap_err();
        assert!(err.to_string().contains("no tools array"), "{err}");
    }
}
