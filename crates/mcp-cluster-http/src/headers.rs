//! Header names and the checks every MCP route applies.

use std::borrow::Cow;

use actix_web::HttpRequest;
use actix_web::http::header::{ACCEPT, CONTENT_TYPE, HOST, HeaderMap, HeaderName, ORIGIN};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mcp_cluster_protocol::{Message, ProtocolVersion, methods};
use mcp_cluster_runtime::McpService;
use mcp_cluster_store::SessionId;
use serde_json::Value;

use crate::config::allowed;
use crate::{HttpConfig, HttpError};

// Header names as `HeaderName`s: a lookup by `&str` parses the name
// each time.

/// `Mcp-Session-Id`.
pub const SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`.
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// `Mcp-Method` (standard MCP request header).
pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
/// `Mcp-Name` (standard MCP request header).
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// Prefix of `Mcp-Param-{name}` headers (`x-mcp-header`).
pub const MCP_PARAM_PREFIX: &str = "mcp-param-";
/// Base64 sentinel of `Mcp-Param-*` values: `=?base64?{value}?=`.
const BASE64_PREFIX: &str = "=?base64?";
const BASE64_SUFFIX: &str = "?=";

/// Checks `Host` and `Origin` against the allow-lists (Streamable HTTP
/// security warning: servers MUST validate Origin; DNS rebinding).
///
/// # Errors
/// [`HttpError::ForbiddenHost`], [`HttpError::ForbiddenOrigin`].
pub fn check_host_and_origin(req: &HttpRequest, config: &HttpConfig) -> Result<(), HttpError> {
    // The raw Host header (or the HTTP/2 authority), never X-Forwarded-Host,
    // which any client can set.
    let host = match req.headers().get(HOST) {
        Some(value) => value.to_str().map_err(|_| HttpError::ForbiddenHost)?,
        None => req
            .uri()
            .authority()
            .map(|a| a.as_str())
            .ok_or(HttpError::ForbiddenHost)?,
    };
    if !allowed(&config.allowed_hosts, host) {
        return Err(HttpError::ForbiddenHost);
    }
    if let Some(origin) = req.headers().get(ORIGIN) {
        let origin = origin.to_str().map_err(|_| HttpError::ForbiddenOrigin)?;
        if !allowed(&config.allowed_origins, origin) {
            return Err(HttpError::ForbiddenOrigin);
        }
    }
    Ok(())
}

/// Whether the `Accept` header lists every media type of `wanted`
/// (directly or by wildcard) with a nonzero weight, read in one pass.
fn accepts<const N: usize>(headers: &HeaderMap, wanted: [&str; N]) -> bool {
    let kinds = wanted.map(|w| w.split_once('/').map_or(w, |(kind, _)| kind));
    let mut listed = [false; N];
    let items = headers
        .get_all(ACCEPT)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for item in items {
        let (media, params) = item.split_once(';').unwrap_or((item, ""));
        let media = media.trim();
        // RFC 9110 12.4.2: a weight of 0 means "not acceptable".
        let refused = params.split(';').any(|param| {
            param.split_once('=').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("q")
                    && value.trim().parse::<f32>().is_ok_and(|q| q == 0.0)
            })
        });
        if refused {
            continue;
        }
        for ((listed, wanted), kind) in listed.iter_mut().zip(wanted).zip(kinds) {
            *listed |= media.eq_ignore_ascii_case(wanted)
                || media == "*/*"
                || media
                    .strip_suffix("/*")
                    .is_some_and(|k| k.eq_ignore_ascii_case(kind));
        }
        if listed.iter().all(|&l| l) {
            return true;
        }
    }
    false
}

/// POST must accept both JSON and SSE (Streamable HTTP, sending messages).
///
/// # Errors
/// [`HttpError::NotAcceptable`].
pub fn check_post_accept(headers: &HeaderMap) -> Result<(), HttpError> {
    if accepts(headers, ["application/json", "text/event-stream"]) {
        Ok(())
    } else {
        Err(HttpError::NotAcceptable(
            "Accept must list application/json and text/event-stream",
        ))
    }
}

/// GET must accept SSE (Streamable HTTP, listening for messages).
///
/// # Errors
/// [`HttpError::NotAcceptable`].
pub fn check_get_accept(headers: &HeaderMap) -> Result<(), HttpError> {
    if accepts(headers, ["text/event-stream"]) {
        Ok(())
    } else {
        Err(HttpError::NotAcceptable(
            "Accept must list text/event-stream",
        ))
    }
}

/// POST bodies are JSON.
///
/// # Errors
/// [`HttpError::UnsupportedMediaType`].
pub fn check_content_type(headers: &HeaderMap) -> Result<(), HttpError> {
    let media = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next());
    if media.is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json")) {
        Ok(())
    } else {
        Err(HttpError::UnsupportedMediaType)
    }
}

/// The `MCP-Protocol-Version` header, when sent.
///
/// # Errors
/// [`HttpError::UnsupportedVersion`] for a revision this server does not
/// serve (2025-06-18 transports: MUST respond 400).
pub fn protocol_version(headers: &HeaderMap) -> Result<Option<ProtocolVersion>, HttpError> {
    let Some(value) = headers.get(PROTOCOL_VERSION) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| HttpError::UnsupportedVersion("(not ASCII)".into()))?;
    text.parse()
        .map(Some)
        .map_err(|_| HttpError::UnsupportedVersion(text.chars().take(32).collect()))
}

/// The `Mcp-Session-Id` header, when sent.
///
/// # Errors
/// [`HttpError::MalformedSession`] when it is not 1-128 visible ASCII.
pub fn session_id(headers: &HeaderMap) -> Result<Option<SessionId>, HttpError> {
    let Some(value) = headers.get(SESSION_ID) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| HttpError::MalformedSession)?;
    text.parse()
        .map(Some)
        .map_err(|_| HttpError::MalformedSession)
}

/// Checks the standard MCP request headers against the body, when sent:
/// `Mcp-Method` = `method`, `Mcp-Name` = `params.name` / `params.uri`, and
/// each `Mcp-Param-{h}` = the tool argument its `x-mcp-header` names.
/// A header sent more than once is checked in every instance: a proxy may
/// route on any one of them.
///
/// # Errors
/// [`HttpError::HeaderMismatch`] (400, -32020).
pub fn check_standard_headers(
    headers: &HeaderMap,
    message: &Message,
    service: &dyn McpService,
) -> Result<(), HttpError> {
    let (method, params, id) = match message {
        Message::Request(r) => (r.method.as_str(), r.params.as_ref(), Some(&r.id)),
        Message::Notification(n) => (n.method.as_str(), n.params.as_ref(), None),
        Message::Response(_) => return Ok(()),
    };
    check_fields(headers, method, params, id, service, false)
}

/// The header checks of one message. `required` (2026-07-28): a header the
/// body calls for must be sent, not only match when it is.
fn check_fields(
    headers: &HeaderMap,
    method: &str,
    params: Option<&serde_json::Map<String, Value>>,
    id: Option<&mcp_cluster_protocol::RequestId>,
    service: &dyn McpService,
    required: bool,
) -> Result<(), HttpError> {
    let mismatch = |message: String| HttpError::HeaderMismatch {
        message,
        id: id.cloned(),
    };
    let missing = |name: &str| mismatch(format!("required header {name} is missing"));
    // One lookup per header name: each hashes the name.
    let mut sent_methods = headers.get_all(MCP_METHOD).peekable();
    if required && sent_methods.peek().is_none() {
        return Err(missing("Mcp-Method"));
    }
    for value in sent_methods {
        let sent = value
            .to_str()
            .map_err(|_| mismatch("Mcp-Method is not visible ASCII".into()))?;
        if sent != method {
            return Err(mismatch(format!(
                "Mcp-Method header value '{sent}' does not match body value '{method}'"
            )));
        }
    }
    if let Some(field) = methods::name_param(method) {
        let body = params.and_then(|p| p.get(field));
        let mut sent_names = headers.get_all(MCP_NAME).peekable();
        if required && body.is_some() && sent_names.peek().is_none() {
            return Err(missing("Mcp-Name"));
        }
        for value in sent_names {
            let sent = header_text(value.as_bytes())
                .ok_or_else(|| mismatch("Mcp-Name has invalid characters".into()))?;
            if body.and_then(Value::as_str) != Some(&*sent) {
                return Err(mismatch(format!(
                    "Mcp-Name header value '{sent}' does not match body {field}"
                )));
            }
        }
    }
    if method == methods::TOOLS_CALL
        && (required
            || headers
                .keys()
                .any(|k| k.as_str().starts_with(MCP_PARAM_PREFIX)))
    {
        let tool = params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let args = params
            .and_then(|p| p.get("arguments"))
            .and_then(Value::as_object);
        for mirrored in service.mirrored_params(tool) {
            let name = format!("{MCP_PARAM_PREFIX}{}", mirrored.header.to_ascii_lowercase());
            let body = args
                .and_then(|a| a.get(&mirrored.argument))
                .filter(|v| !v.is_null());
            let mut sent_values = headers.get_all(name.as_str()).peekable();
            if required && body.is_some() && sent_values.peek().is_none() {
                return Err(missing(&format!("Mcp-Param-{}", mirrored.header)));
            }
            for value in sent_values {
                let sent = header_text(value.as_bytes()).ok_or_else(|| {
                    mismatch(format!(
                        "Mcp-Param-{} has invalid characters",
                        mirrored.header
                    ))
                })?;
                if !body.is_some_and(|v| same_value(&sent, v)) {
                    return Err(mismatch(format!(
                        "Mcp-Param-{} does not match argument {}",
                        mirrored.header, mirrored.argument
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The 2026-07-28 rule on top of [`check_standard_headers`]: the standard
/// headers are required, not only checked when sent. `Mcp-Method` on every
/// request, `Mcp-Name` where the body has the field it mirrors, and each
/// `Mcp-Param-*` whose argument the body carries. (`MCP-Protocol-Version`
/// is compared with the request's `_meta` before this.)
///
/// # Errors
/// [`HttpError::HeaderMismatch`] (400, -32020) naming the missing or
/// mismatched header.
pub fn check_required_headers(
    headers: &HeaderMap,
    request: &mcp_cluster_protocol::Request,
    service: &dyn McpService,
) -> Result<(), HttpError> {
    check_fields(
        headers,
        &request.method,
        request.params.as_ref(),
        Some(&request.id),
        service,
        true,
    )
}

/// A header value as text: plain visible ASCII (with inner spaces), or the
/// base64 sentinel form decoded as UTF-8.
fn header_text(raw: &[u8]) -> Option<Cow<'_, str>> {
    let plain = raw
        .iter()
        .all(|&b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b));
    if !plain {
        return None;
    }
    let text = std::str::from_utf8(raw).ok()?;
    match text
        .strip_prefix(BASE64_PREFIX)
        .and_then(|t| t.strip_suffix(BASE64_SUFFIX))
    {
        Some(encoded) => String::from_utf8(STANDARD.decode(encoded).ok()?)
            .ok()
            .map(Cow::Owned),
        None => Some(Cow::Borrowed(text)),
    }
}

/// Whether a header's text is the string form of a body value (string as
/// is, numbers in decimal, booleans lowercase).
fn same_value(sent: &str, body: &Value) -> bool {
    match body {
        Value::String(s) => s == sent,
        Value::Bool(b) => sent == if *b { "true" } else { "false" },
        Value::Number(n) => {
            // Integers exactly: past 2^53 one f64 stands for several, and
            // the tool sees the exact integer.
            let integer = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
            if let Some(body) = integer {
                if let Ok(sent) = sent.parse::<i128>() {
                    return sent == body;
                }
                if body.unsigned_abs() > 1 << 53 {
                    return false;
                }
            }
            match (n.as_f64(), sent.parse::<f64>()) {
                (Some(a), Ok(b)) => a == b,
                _ => false,
            }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_items_weighted_zero_are_refused() {
        let accept = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                ACCEPT,
                actix_web::http::header::HeaderValue::from_static(value),
            );
            headers
        };
        assert!(check_post_accept(&accept("application/json, text/event-stream;q=0.5")).is_ok());
        assert!(check_post_accept(&accept("application/json, text/event-stream;q=0")).is_err());
        assert!(check_post_accept(&accept("*/*; q=0.000")).is_err());
        // Media types match without regard to case, and by wildcard.
        assert!(check_post_accept(&accept("Application/JSON, TEXT/Event-Stream")).is_ok());
        assert!(check_post_accept(&accept("application/*, text/*;q=0.1")).is_ok());
        assert!(check_post_accept(&accept("application/json, image/*")).is_err());
        // An item weighted 0 refuses only itself; a wildcard beside it lists
        // its type again.
        assert!(check_post_accept(&accept("application/json;q=0, */*")).is_ok());
        assert!(check_get_accept(&accept("application/json")).is_err());
        // The types may come in separate Accept headers.
        let mut two = accept("application/json");
        two.append(
            ACCEPT,
            actix_web::http::header::HeaderValue::from_static("text/event-stream"),
        );
        assert!(check_post_accept(&two).is_ok());
        assert!(check_get_accept(&two).is_ok());
    }

    #[test]
    fn base64_sentinel_values_decode() {
        assert_eq!(
            header_text(b"=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(header_text(b"us-west1").as_deref(), Some("us-west1"));
        assert_eq!(header_text(b"=?base64?!!!?="), None);
        assert_eq!(header_text(b"caf\xc3\xa9"), None);
    }

    #[test]
    fn values_compare_by_their_string_form() {
        assert!(same_value("42", &serde_json::json!(42)));
        assert!(same_value("2.5", &serde_json::json!(2.5)));
        assert!(same_value("true", &serde_json::json!(true)));
        assert!(!same_value("True", &serde_json::json!(true)));
        assert!(!same_value("x", &serde_json::json!({"a": 1})));
    }

    #[test]
    fn large_integers_compare_exactly() {
        // 2^53 + 1 and 2^53 are one f64, but two arguments for the tool.
        let body = serde_json::json!(9_007_199_254_740_993_u64);
        assert!(same_value("9007199254740993", &body));
        assert!(!same_value("9007199254740992", &body));
        assert!(!same_value("9007199254740992.0", &body));
        assert!(!same_value("9.007199254740992e15", &body));
        let max = serde_json::json!(u64::MAX);
        assert!(same_value("18446744073709551615", &max));
        assert!(!same_value("18446744073709551614", &max));
        assert!(same_value(
            "-9007199254740992",
            &serde_json::json!(-(1_i64 << 53))
        ));
        assert!(same_value("3.0", &serde_json::json!(3)));
        assert!(same_value("+3", &serde_json::json!(3)));
    }
}
