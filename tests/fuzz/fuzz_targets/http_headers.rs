//! Fuzz target: the header checks of `mcp-cluster-http` (`headers.rs`) and the
//! Host / Origin allow-lists (`config.rs`'s `allowed`, reached through
//! `check_host_and_origin` on an `actix_web::test::TestRequest`).
//!
//! The input is a request head and body as text: `Name: value` header
//! lines, then a blank line and the JSON-RPC body. Lines starting with `@`
//! configure the check instead of adding a header:
//! - `@allow-host: <pattern>`, `@allow-origin: <pattern>`: the allow-lists
//!   (the defaults when none is given; `@default` adds the defaults);
//! - `@authority: <host[:port]>`: the request target's authority;
//! - `@mirror: <Header>=<argument>`: a tool argument mirrored into
//!   `Mcp-Param-<Header>`.
//!
//! Invariants: no panic, and
//! - `Accept`: POST passing implies GET passing; case, order and extra
//!   values keep or widen the verdict; a passing GET has an item naming
//!   `text/event-stream` or a wildcard of it, and a bare `text/event-stream`
//!   item always passes;
//! - `Content-Type`, `MCP-Protocol-Version`, `Mcp-Session-Id`: the verdict
//!   is what the documented rule says, and what parses is the header text;
//! - `Mcp-Method` / `Mcp-Name` / `Mcp-Param-*`: a pass means every sent
//!   value decodes (plain, or the `=?base64?…?=` sentinel) to the body's
//!   value (numbers numerically, integers exactly); headers written from
//!   the body always pass, and a changed one fails; a failure is a -32020
//!   mismatch carrying the request id;
//! - Host / Origin: allowed exactly when a pattern matches (`*`, the value
//!   ignoring ASCII case, or `host:*` for the host with any digit port).
#![no_main]

use std::str::FromStr;

use actix_web::http::Uri;
use actix_web::http::header::{
    ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue, ORIGIN,
};
use actix_web::test::TestRequest;
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use libfuzzer_sys::fuzz_target;
use mcp_cluster_http::headers::{
    self, MCP_METHOD, MCP_NAME, MCP_PARAM_PREFIX, PROTOCOL_VERSION, SESSION_ID,
};
use mcp_cluster_http::{HttpConfig, HttpError};
use mcp_cluster_protocol::jsonrpc::decode_message;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorObject, Message, Request, RequestId, methods};
use mcp_cluster_runtime::{McpService, MirroredParam, RequestContext};
use serde_json::{Map, Value};

/// A request as the input describes it.
#[derive(Debug, Default)]
struct Input {
    headers: HeaderMap,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    authority: Option<String>,
    mirrored: Vec<MirroredParam>,
    message: Option<Message>,
}

impl Input {
    fn parse(data: &[u8]) -> Self {
        let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
            Some(i) => (&data[..i], &data[i + 2..]),
            None => (data, &[][..]),
        };
        let mut input = Self {
            message: decode_message(body).ok(),
            ..Self::default()
        };
        let defaults = HttpConfig::default();
        for line in head.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                continue;
            };
            let name = &line[..colon];
            // What an HTTP parser keeps of a value: no surrounding whitespace.
            let value = line[colon + 1..].trim_ascii();
            let text = String::from_utf8_lossy(value).into_owned();
            match name {
                b"@allow-host" if text == "@default" => {
                    input
                        .allowed_hosts
                        .extend(defaults.allowed_hosts.iter().cloned());
                }
                b"@allow-host" => input.allowed_hosts.push(text),
                b"@allow-origin" if text == "@default" => {
                    input
                        .allowed_origins
                        .extend(defaults.allowed_origins.iter().cloned());
                }
                b"@allow-origin" => input.allowed_origins.push(text),
                b"@authority" => input.authority = Some(text),
                b"@mirror" => {
                    let (header, argument) = text.split_once('=').unwrap_or((&text, ""));
                    // Registration keeps one argument per header name,
                    // ignoring case.
                    if !input
                        .mirrored
                        .iter()
                        .any(|m| m.header.eq_ignore_ascii_case(header))
                    {
                        input.mirrored.push(MirroredParam {
                            header: header.to_owned(),
                            argument: argument.to_owned(),
                        });
                    }
                }
                _ => {
                    if let (Ok(name), Ok(value)) =
                        (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
                    {
                        input.headers.append(name, value);
                    }
                }
            }
        }
        if input.allowed_hosts.is_empty() {
            input.allowed_hosts = defaults.allowed_hosts;
        }
        if input.allowed_origins.is_empty() {
            input.allowed_origins = defaults.allowed_origins;
        }
        input
    }
}

/// A service whose every tool mirrors the same arguments.
#[derive(Debug)]
struct Mirrors(Vec<MirroredParam>);

#[async_trait]
impl McpService for Mirrors {
    fn server_info(&self) -> Implementation {
        Implementation::default()
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, _: Request, _: RequestContext) -> Result<Value, ErrorObject> {
        Ok(Value::Null)
    }

    fn mirrored_params(&self, _tool: &str) -> Vec<MirroredParam> {
        self.0.clone()
    }
}

fuzz_target!(|data: &[u8]| {
    let input = Input::parse(data);
    let map = &input.headers;
    accept(map);
    content_type(map);
    protocol_version(map);
    session_id(map);
    let service = Mirrors(input.mirrored.clone());
    if let Some(message) = &input.message {
        standard_headers(map, message, &service);
        headers_from_the_body(message, &service);
    }
    host_and_origin(&input);
});

/// The same map with each `name` value passed through `f`.
fn map_values(map: &HeaderMap, name: &HeaderName, f: impl Fn(&[u8]) -> Vec<u8>) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (n, v) in map {
        let v = if n == name {
            HeaderValue::from_bytes(&f(v.as_bytes())).expect("still a header value")
        } else {
            v.clone()
        };
        out.append(n.clone(), v);
    }
    out
}

fn accept(map: &HeaderMap) {
    let post = headers::check_post_accept(map).is_ok();
    let get = headers::check_get_accept(map).is_ok();
    if post {
        assert!(get, "POST accepted but GET refused");
    }
    // ASCII case does not matter.
    for f in [<[u8]>::to_ascii_uppercase, <[u8]>::to_ascii_lowercase] {
        let cased = map_values(map, &ACCEPT, f);
        assert_eq!(headers::check_post_accept(&cased).is_ok(), post, "case");
        assert_eq!(headers::check_get_accept(&cased).is_ok(), get, "case");
    }
    // Nor does the order of Accept headers.
    let mut reversed = HeaderMap::new();
    let values: Vec<_> = map.get_all(ACCEPT).cloned().collect();
    for v in values.into_iter().rev() {
        reversed.append(ACCEPT, v);
    }
    assert_eq!(headers::check_post_accept(&reversed).is_ok(), post, "order");
    // More accepted types never refuse.
    let mut more = map.clone();
    more.append(ACCEPT, HeaderValue::from_static("*/*"));
    assert!(headers::check_post_accept(&more).is_ok(), "*/* added");

    let items: Vec<String> = map
        .get_all(ACCEPT)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::to_owned)
        .collect();
    let media = |item: &str| {
        item.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    if get {
        assert!(
            items
                .iter()
                .any(|i| ["text/event-stream", "text/*", "*/*"].contains(&media(i).as_str())),
            "GET accepted {items:?}"
        );
    }
    if items
        .iter()
        .any(|i| i.trim().eq_ignore_ascii_case("text/event-stream"))
    {
        assert!(get, "GET refused {items:?}");
    }
}

fn content_type(map: &HeaderMap) {
    let ok = headers::check_content_type(map).is_ok();
    let expected = map
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
    assert_eq!(ok, expected, "{:?}", map.get(CONTENT_TYPE));
}

fn protocol_version(map: &HeaderMap) {
    let sent = map.get(PROTOCOL_VERSION);
    match headers::protocol_version(map) {
        Ok(None) => assert!(sent.is_none()),
        Ok(Some(version)) => {
            assert_eq!(
                Some(version.as_str().as_bytes()),
                sent.map(HeaderValue::as_bytes)
            );
        }
        Err(HttpError::UnsupportedVersion(shown)) => {
            assert!(sent.is_some());
            assert!(shown.chars().count() <= 32, "{shown:?}");
        }
        Err(other) => panic!("{other:?}"),
    }
}

fn session_id(map: &HeaderMap) {
    let sent = map.get(SESSION_ID).map(HeaderValue::as_bytes);
    let shape =
        |b: &[u8]| (1..=128).contains(&b.len()) && b.iter().all(|c| (0x21..=0x7e).contains(c));
    match headers::session_id(map) {
        Ok(None) => assert!(sent.is_none()),
        Ok(Some(id)) => {
            assert_eq!(Some(id.as_str().as_bytes()), sent);
            assert!(shape(id.as_str().as_bytes()));
        }
        Err(HttpError::MalformedSession) => assert!(!shape(sent.expect("sent"))),
        Err(other) => panic!("{other:?}"),
    }
}

/// A header value as the server must read it: visible ASCII, space and tab;
/// `=?base64?<base64>?=` decoded as UTF-8.
fn decode(raw: &[u8]) -> Option<String> {
    if !raw
        .iter()
        .all(|&b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b))
    {
        return None;
    }
    let text = std::str::from_utf8(raw).ok()?;
    let (prefix, suffix) = ("=?base64?", "?=");
    if text.len() >= prefix.len() + suffix.len()
        && text.starts_with(prefix)
        && text.ends_with(suffix)
    {
        let inner = &text[prefix.len()..text.len() - suffix.len()];
        return String::from_utf8(STANDARD.decode(inner).ok()?).ok();
    }
    Some(text.to_owned())
}

/// How a client writes a string into a header: as is when that reads back
/// the same, else in the base64 sentinel.
fn encode(text: &str) -> String {
    let plain = text
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) || b == b' ')
        && text.trim() == text
        && decode(text.as_bytes()).as_deref() == Some(text);
    if plain {
        text.to_owned()
    } else {
        format!("=?base64?{}?=", STANDARD.encode(text))
    }
}

/// Whether header text `sent` stands for body value `body`: strings as they
/// are, booleans lowercase, numbers numerically (integers exactly).
fn same(sent: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => s == sent,
        Value::Bool(b) => sent == b.to_string(),
        Value::Number(n) => {
            let integer = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
            let digits = sent.strip_prefix(['+', '-']).unwrap_or(sent);
            let literal = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            match (integer, literal) {
                (Some(body), true) => sent.parse::<i128>().is_ok_and(|s| s == body),
                // Past 2^53 an f64 cannot tell integers apart.
                (Some(body), false) if body.unsigned_abs() > 1 << 53 => false,
                _ => matches!((n.as_f64(), sent.parse::<f64>()), (Some(a), Ok(b)) if a == b),
            }
        }
        _ => false,
    }
}

/// Method, params and id of a request or notification.
type Parts<'a> = (&'a str, Option<&'a Map<String, Value>>, Option<RequestId>);

fn parts(message: &Message) -> Option<Parts<'_>> {
    match message {
        Message::Request(r) => Some((r.method.as_str(), r.params.as_ref(), Some(r.id.clone()))),
        Message::Notification(n) => Some((n.method.as_str(), n.params.as_ref(), None)),
        Message::Response(_) => None,
    }
}

fn param_header(header: &str) -> Option<HeaderName> {
    HeaderName::from_bytes(
        format!("{MCP_PARAM_PREFIX}{header}")
            .to_ascii_lowercase()
            .as_bytes(),
    )
    .ok()
}

/// Checks the verdict on arbitrary headers against what was sent.
fn standard_headers(map: &HeaderMap, message: &Message, service: &Mirrors) {
    let verdict = headers::check_standard_headers(map, message, service);
    let Some((method, params, id)) = parts(message) else {
        assert!(verdict.is_ok(), "a response is never checked");
        return;
    };
    if let Err(err) = verdict {
        match err {
            HttpError::HeaderMismatch { id: carried, .. } => assert_eq!(carried, id),
            other => panic!("{other:?}"),
        }
        return;
    }
    for value in map.get_all(MCP_METHOD) {
        assert_eq!(value.as_bytes(), method.as_bytes(), "Mcp-Method passed");
    }
    if let Some(field) = methods::name_param(method) {
        let body = params.and_then(|p| p.get(field)).and_then(Value::as_str);
        for value in map.get_all(MCP_NAME) {
            assert_eq!(
                decode(value.as_bytes()).as_deref(),
                body,
                "Mcp-Name {value:?} passed"
            );
        }
    }
    if method == methods::TOOLS_CALL {
        let args = params
            .and_then(|p| p.get("arguments"))
            .and_then(Value::as_object);
        for mirrored in &service.0 {
            let Some(name) = param_header(&mirrored.header) else {
                continue;
            };
            let body = args.and_then(|a| a.get(&mirrored.argument));
            for value in map.get_all(&name) {
                let sent = decode(value.as_bytes()).expect("passed, so readable");
                assert!(
                    body.is_some_and(|b| same(&sent, b)),
                    "{name}: {sent:?} passed for {body:?}"
                );
            }
        }
    }
}

/// Headers a correct client writes from the body pass; a changed one fails.
fn headers_from_the_body(message: &Message, service: &Mirrors) {
    let Some((method, params, _)) = parts(message) else {
        return;
    };
    let mut map = HeaderMap::new();
    let method_header = HeaderValue::from_str(method)
        .ok()
        .filter(|v| v.to_str().is_ok_and(|s| s.trim() == s));
    if let Some(value) = &method_header {
        map.insert(MCP_METHOD, value.clone());
    }
    let name_header = methods::name_param(method)
        .and_then(|field| params?.get(field)?.as_str())
        .map(|name| HeaderValue::from_str(&encode(name)).expect("encoded is ASCII"));
    if let Some(value) = &name_header {
        map.insert(MCP_NAME, value.clone());
    }
    let args = params
        .and_then(|p| p.get("arguments"))
        .and_then(Value::as_object);
    if method == methods::TOOLS_CALL {
        for mirrored in &service.0 {
            let Some(name) = param_header(&mirrored.header) else {
                continue;
            };
            let text = match args.and_then(|a| a.get(&mirrored.argument)) {
                Some(Value::String(s)) => encode(s),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => continue,
            };
            map.append(name, HeaderValue::from_str(&text).expect("ASCII"));
        }
    }
    let verdict = headers::check_standard_headers(&map, message, service);
    assert!(
        verdict.is_ok(),
        "headers written from the body: {map:?}: {verdict:?}"
    );

    // A method header that says something else fails.
    if method_header.is_some() {
        let mut changed = map.clone();
        let other = HeaderValue::from_str(&format!("{method}x")).expect("ASCII");
        changed.insert(MCP_METHOD, other);
        assert!(headers::check_standard_headers(&changed, message, service).is_err());
    }
    // So does a name header naming something else.
    if let Some(value) = &name_header {
        let mut changed = map.clone();
        let sent = decode(value.as_bytes()).expect("readable");
        let other = HeaderValue::from_str(&encode(&format!("{sent}x"))).expect("ASCII");
        changed.append(MCP_NAME, other);
        assert!(headers::check_standard_headers(&changed, message, service).is_err());
    }
}

/// The allow-list rule as documented on `HttpConfig`.
fn matches(patterns: &[String], value: &str) -> bool {
    patterns.iter().any(|p| {
        if p == "*" || p.eq_ignore_ascii_case(value) {
            return true;
        }
        let Some(base) = p.strip_suffix(":*") else {
            return false;
        };
        // `value` is `base`, or `base:` and one or more digits.
        let Some(head) = value.get(..base.len()) else {
            return false;
        };
        let rest = &value[base.len()..];
        head.eq_ignore_ascii_case(base)
            && (rest.is_empty()
                || rest.strip_prefix(':').is_some_and(|port| {
                    !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                }))
    })
}

fn host_and_origin(input: &Input) {
    let map = &input.headers;
    let config = HttpConfig {
        allowed_hosts: input.allowed_hosts.clone(),
        allowed_origins: input.allowed_origins.clone(),
        ..HttpConfig::default()
    };
    let mut req = TestRequest::default();
    let mut authority = None;
    if let Some(a) = &input.authority
        && let Ok(uri) = Uri::from_str(&format!("http://{a}/mcp"))
    {
        authority = uri.authority().map(|a| a.as_str().to_owned());
        req = req.uri(&uri.to_string());
    }
    for (name, value) in map {
        req = req.append_header((name.clone(), value.clone()));
    }
    let req = req.to_http_request();
    let verdict = headers::check_host_and_origin(&req, &config);

    let host = match map.get(HOST) {
        Some(v) => v.to_str().ok().map(str::to_owned),
        None => authority,
    };
    let host_ok = host.is_some_and(|h| matches(&config.allowed_hosts, &h));
    let origin_ok = match map.get(ORIGIN) {
        None => true,
        Some(v) => v
            .to_str()
            .is_ok_and(|o| matches(&config.allowed_origins, o)),
    };
    match verdict {
        Ok(()) => assert!(
            host_ok && origin_ok,
            "allowed: {host_ok} {origin_ok} {config:?}"
        ),
        Err(HttpError::ForbiddenHost) => assert!(!host_ok, "host refused: {config:?}"),
        Err(HttpError::ForbiddenOrigin) => {
            assert!(host_ok && !origin_ok, "origin refused: {config:?}");
        }
        Err(other) => panic!("{other:?}"),
    }
}
