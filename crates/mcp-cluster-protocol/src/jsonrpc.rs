//! JSON-RPC 2.0 envelopes as MCP restricts them: ids are strings or integers
//! (never null), `params` is an object, batches are a transport decision.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::error::{ErrorCode, ErrorObject};

mod meta;

pub use meta::StatelessMeta;
use meta::{ParamsOut, RawParams};

/// A JSON-RPC request id: a string or an integer, never null (MCP base
/// protocol, requests).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl RequestId {
    /// Reads an id from a JSON value; `None` for null, floats and the rest.
    pub fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(Self::String(s.clone())),
            Value::Number(n) => n.as_i64().map(Self::Number),
            _ => None,
        }
    }

    /// Reads an id from a JSON value it takes: a string id is moved, not
    /// copied; `None` as for [`Self::from_value`].
    pub fn from_owned(value: Value) -> Option<Self> {
        match value {
            Value::String(s) => Some(Self::String(s)),
            other => Self::from_value(&other),
        }
    }

    /// The id as a JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Number(n) => Value::from(*n),
            Self::String(s) => Value::from(s.as_str()),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl Serialize for RequestId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Number(n) => s.serialize_i64(*n),
            Self::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for RequestId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        Self::from_owned(value).ok_or_else(|| D::Error::custom("id must be a string or an integer"))
    }
}

impl From<i64> for RequestId {
    fn from(n: i64) -> Self {
        Self::Number(n)
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

/// A request: expects exactly one response with the same id.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The id, unique among the sender's in-flight requests.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The params object, if any.
    pub params: Option<Map<String, Value>>,
    /// The 2026-07-28 fields of `params._meta`, taken out of it when the
    /// request was decoded ([`Request::stateless_meta`] reads them).
    pub stateless: Option<Box<StatelessMeta>>,
}

/// A notification: one-way, no id, no response.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The method name.
    pub method: String,
    /// The params object, if any.
    pub params: Option<Map<String, Value>>,
    /// The 2026-07-28 fields of `params._meta`, taken out of it when the
    /// notification was decoded.
    pub stateless: Option<Box<StatelessMeta>>,
}

/// A response: a result or an error for one request id.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The id of the request this answers; `None` only for errors about a
    /// message whose id could not be read.
    pub id: Option<RequestId>,
    /// The result object or the error.
    pub outcome: Result<Value, ErrorObject>,
    /// Members written into the result object after its own, each only
    /// where the result has no member of that name: what every result of
    /// an era carries (the 2026-07-28 revision's `resultType` and server
    /// identity), made once and shared by the responses instead of copied
    /// into each result. Ignored for an error or a result that is not an
    /// object; `None` once decoded (they are then the result's own).
    pub shared: Option<Arc<Map<String, Value>>>,
}

impl Response {
    /// A success response.
    pub fn result(id: RequestId, result: Value) -> Self {
        Self {
            id: Some(id),
            outcome: Ok(result),
            shared: None,
        }
    }

    /// An error response.
    pub fn error(id: Option<RequestId>, error: ErrorObject) -> Self {
        Self {
            id,
            outcome: Err(error),
            shared: None,
        }
    }

    /// A response for `id` with this outcome, nothing shared.
    pub fn new(id: Option<RequestId>, outcome: Result<Value, ErrorObject>) -> Self {
        Self {
            id,
            outcome,
            shared: None,
        }
    }
}

/// Any single JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response to a request the receiver sent.
    Response(Response),
}

impl Message {
    /// The method name of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Self::Request(r) => Some(&r.method),
            Self::Notification(n) => Some(&n.method),
            Self::Response(_) => None,
        }
    }

    /// Encodes the message as compact JSON.
    pub fn to_json(&self) -> String {
        // unwrap: every field serializes to JSON (string keys, no NaN source).
        #[allow(clippy::unwrap_used)]
        serde_json::to_string(self).unwrap()
    }
}

/// Why a body is not a valid JSON-RPC message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct DecodeError {
    /// `-32700` for bad JSON, `-32600` for a bad envelope, `-32602` for
    /// params that are not an object.
    pub code: ErrorCode,
    /// What is wrong, for the client.
    pub message: String,
    /// The id, when it could be read (so the error can answer the request).
    pub id: Option<RequestId>,
}

impl DecodeError {
    fn invalid(message: impl Into<String>, id: Option<RequestId>) -> Self {
        Self {
            code: ErrorCode::INVALID_REQUEST,
            message: message.into(),
            id,
        }
    }

    /// The error object to send back.
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject::new(self.code, self.message.clone())
    }
}

/// What a body holds: one message or a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// A single message.
    Single(Message),
    /// A JSON-RPC batch; each element decoded on its own.
    Batch(Vec<Result<Message, DecodeError>>),
}

/// The envelope as read, before validation. `id` distinguishes absent
/// (`None`) from null (`Some(Value::Null)`).
#[derive(Deserialize)]
struct RawEnvelope {
    #[serde(default)]
    jsonrpc: Option<Version>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default, deserialize_with = "present_params")]
    params: Option<RawParams>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    error: Option<Value>,
}

/// The `jsonrpc` member: "2.0" or anything else, read without a copy.
enum Version {
    Two,
    Other,
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(VersionVisitor)
    }
}

struct VersionVisitor;

impl<'de> serde::de::Visitor<'de> for VersionVisitor {
    type Value = Version;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"2.0\"")
    }

    fn visit_str<E>(self, v: &str) -> Result<Version, E> {
        Ok(if v == "2.0" {
            Version::Two
        } else {
            Version::Other
        })
    }

    fn visit_bool<E>(self, _: bool) -> Result<Version, E> {
        Ok(Version::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Version, E> {
        Ok(Version::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Version, E> {
        Ok(Version::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Version, E> {
        Ok(Version::Other)
    }

    fn visit_unit<E>(self) -> Result<Version, E> {
        Ok(Version::Other)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Version, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Version::Other)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Version, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(Version::Other)
    }
}

fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn present_params<'de, D: Deserializer<'de>>(d: D) -> Result<Option<RawParams>, D::Error> {
    RawParams::deserialize(d).map(Some)
}

/// Decodes an HTTP or stdio body: one message, or a batch (array) of any
/// length. Transports use [`decode_body_with_limit`].
///
/// # Errors
/// As [`decode_body_with_limit`].
pub fn decode_body(bytes: &[u8]) -> Result<Body, DecodeError> {
    decode_body_with_limit(bytes, usize::MAX)
}

/// Decodes an HTTP or stdio body: one message, or a batch (array) of at
/// most `max_batch` messages. A longer batch is refused whole before any
/// member is decoded, and costs no memory per member: the rest of the array
/// is only counted.
///
/// # Errors
/// `-32700` when the bytes are not JSON, `-32600` when the JSON is not a
/// message, is an empty batch or a batch over `max_batch`, and the
/// per-message errors of [`decode_message`] for a single message.
pub fn decode_body_with_limit(bytes: &[u8], max_batch: usize) -> Result<Body, DecodeError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'[') {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let items = de
            .deserialize_seq(BatchVisitor { max: max_batch })
            .and_then(|items| de.end().map(|()| items))
            .map_err(parse_error)?;
        let items = match items {
            Batch::Items(items) => items,
            Batch::TooLong(count) => {
                return Err(DecodeError::invalid(
                    format!(
                        "batch of {count} messages exceeds the limit of {max_batch}; \
                         send fewer messages per batch"
                    ),
                    None,
                ));
            }
        };
        if items.is_empty() {
            return Err(DecodeError::invalid("empty batch", None));
        }
        let decoded = items
            .into_iter()
            .map(|raw| decode_message(raw.get().as_bytes()))
            .collect();
        return Ok(Body::Batch(decoded));
    }
    decode_message(bytes).map(Body::Single)
}

/// A batch as read: its members (still undecoded), or the length of one
/// over the limit.
enum Batch {
    Items(Vec<Box<serde_json::value::RawValue>>),
    TooLong(usize),
}

/// Reads a JSON array, keeping at most `max` members and only counting the
/// rest.
struct BatchVisitor {
    max: usize,
}

impl<'de> serde::de::Visitor<'de> for BatchVisitor {
    type Value = Batch;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Batch, A::Error> {
        // Bounded by the body size as well: no reservation from a hint.
        let mut items = Vec::new();
        while items.len() < self.max {
            match seq.next_element::<Box<serde_json::value::RawValue>>()? {
                Some(item) => items.push(item),
                None => return Ok(Batch::Items(items)),
            }
        }
        // At the limit: any further member makes the batch too long.
        let mut extra = 0usize;
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
            extra = extra.saturating_add(1);
        }
        if extra == 0 {
            return Ok(Batch::Items(items));
        }
        Ok(Batch::TooLong(self.max.saturating_add(extra)))
    }
}

/// Decodes one message from bytes.
///
/// # Errors
/// `-32700` for bad JSON; `-32600` for a bad envelope (wrong `jsonrpc`, null
/// or fractional id, no method and no result, a result without an id; only an
/// error response may lack its id); `-32602` when `params` is not an object.
pub fn decode_message(bytes: &[u8]) -> Result<Message, DecodeError> {
    // Only an object is a message: the derived `RawEnvelope` would also read
    // an array, field by field (`["2.0",1,"ping"]`).
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Ok(_) => DecodeError::invalid("a JSON-RPC message must be an object", None),
                Err(err) => parse_error(err),
            },
        );
    }
    let raw: RawEnvelope = serde_json::from_slice(bytes).map_err(|err| {
        if err.is_data() {
            DecodeError::invalid("a JSON-RPC message must be an object", None)
        } else {
            parse_error(err)
        }
    })?;
    validate(raw)
}

fn parse_error(err: serde_json::Error) -> DecodeError {
    DecodeError {
        code: ErrorCode::PARSE_ERROR,
        message: format!("parse error: {err}"),
        id: None,
    }
}

fn validate(raw: RawEnvelope) -> Result<Message, DecodeError> {
    // An error about a message whose id could not be read carries a null id
    // (JSON-RPC 2.0 section 5) or none (2025-11-25 `JSONRPCErrorResponse`).
    let idless_error = raw.method.is_none() && raw.result.is_none() && raw.error.is_some();
    let id = match raw.id {
        None => None,
        Some(Value::Null) if idless_error => None,
        Some(Value::Null) => {
            return Err(DecodeError::invalid("id must not be null", None));
        }
        Some(value) => match RequestId::from_owned(value) {
            Some(id) => Some(id),
            None => {
                return Err(DecodeError::invalid(
                    "id must be a string or an integer",
                    None,
                ));
            }
        },
    };
    if !matches!(raw.jsonrpc, Some(Version::Two)) {
        return Err(DecodeError::invalid("jsonrpc must be \"2.0\"", id));
    }
    if let Some(method) = raw.method {
        let Value::String(method) = method else {
            return Err(DecodeError::invalid("method must be a string", id));
        };
        if raw.result.is_some() || raw.error.is_some() {
            return Err(DecodeError::invalid(
                "a request must not carry result or error",
                id,
            ));
        }
        let (params, stateless) = match raw.params {
            None => (None, None),
            Some(RawParams::Object(map, stateless)) => (Some(map), stateless),
            Some(RawParams::NotAnObject) => {
                return Err(DecodeError {
                    code: ErrorCode::INVALID_PARAMS,
                    message: "params must be an object".into(),
                    id,
                });
            }
        };
        return Ok(match id {
            Some(id) => Message::Request(Request {
                id,
                method,
                params,
                stateless,
            }),
            None => Message::Notification(Notification {
                method,
                params,
                stateless,
            }),
        });
    }
    let outcome = match (raw.result, raw.error) {
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(error_object(error).map_err(|_| {
            DecodeError::invalid("error must have an integer code and a message", id.clone())
        })?),
        (Some(_), Some(_)) => {
            return Err(DecodeError::invalid(
                "a response must not carry both result and error",
                id,
            ));
        }
        (None, None) => {
            return Err(DecodeError::invalid(
                "a message needs a method, a result or an error",
                id,
            ));
        }
    };
    if id.is_none() && outcome.is_ok() {
        return Err(DecodeError::invalid("a response needs an id", None));
    }
    Ok(Message::Response(Response::new(id, outcome)))
}

/// The `error` member, an object (the derived `ErrorObject` would also read
/// an array, `[code, message]`).
fn error_object(value: Value) -> Result<ErrorObject, serde_json::Error> {
    if !value.is_object() {
        return Err(serde_json::Error::custom("error must be an object"));
    }
    serde_json::from_value(value)
}

impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Request(r) => r.serialize(s),
            Self::Notification(n) => n.serialize(s),
            Self::Response(r) => r.serialize(s),
        }
    }
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("jsonrpc", "2.0")?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("method", &self.method)?;
        serialize_params(&mut map, self.params.as_ref(), self.stateless.as_deref())?;
        map.end()
    }
}

impl Serialize for Notification {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("jsonrpc", "2.0")?;
        map.serialize_entry("method", &self.method)?;
        serialize_params(&mut map, self.params.as_ref(), self.stateless.as_deref())?;
        map.end()
    }
}

fn serialize_params<M: SerializeMap>(
    map: &mut M,
    params: Option<&Map<String, Value>>,
    stateless: Option<&StatelessMeta>,
) -> Result<(), M::Error> {
    match (params, stateless) {
        (params, Some(stateless)) => {
            map.serialize_entry("params", &ParamsOut { params, stateless })
        }
        (Some(params), None) => map.serialize_entry("params", params),
        (None, None) => Ok(()),
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("jsonrpc", "2.0")?;
        // JSON-RPC 2.0 section 5: id is null when it could not be detected.
        map.serialize_entry("id", &self.id)?;
        match (&self.outcome, &self.shared) {
            (Ok(Value::Object(own)), Some(shared)) => {
                map.serialize_entry("result", &WithShared { own, shared })?;
            }
            (Ok(result), _) => map.serialize_entry("result", result)?,
            (Err(error), _) => map.serialize_entry("error", error)?,
        }
        map.end()
    }
}

/// A result object written with [`Response::shared`]'s members after its
/// own.
struct WithShared<'a> {
    own: &'a Map<String, Value>,
    shared: &'a Map<String, Value>,
}

impl Serialize for WithShared<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (key, value) in self.own {
            map.serialize_entry(key, value)?;
        }
        for (key, value) in self.shared {
            if !self.own.contains_key(key) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

impl Notification {
    /// A notification with typed params.
    pub fn new(method: impl Into<String>, params: impl Serialize) -> Self {
        Self {
            method: method.into(),
            params: to_object(params),
            stateless: None,
        }
    }

    /// The 2026-07-28 fields of `params._meta`, wherever they are: taken
    /// out by decoding, or still in the map of a notification built in
    /// code.
    pub fn stateless_meta(&self) -> Option<Cow<'_, StatelessMeta>> {
        StatelessMeta::of(self.stateless.as_deref(), self.params.as_ref())
    }
}

impl Request {
    /// A request with typed params.
    pub fn new(id: RequestId, method: impl Into<String>, params: impl Serialize) -> Self {
        Self {
            id,
            method: method.into(),
            params: to_object(params),
            stateless: None,
        }
    }

    /// The 2026-07-28 fields of `params._meta`, wherever they are: taken
    /// out by decoding, or still in the map of a request built in code.
    pub fn stateless_meta(&self) -> Option<Cow<'_, StatelessMeta>> {
        StatelessMeta::of(self.stateless.as_deref(), self.params.as_ref())
    }

    /// The params as the client sent them: with the 2026-07-28 fields that
    /// decoding took out of `_meta` put back (for a server that reads them
    /// itself, such as a hosted server of that revision).
    pub fn params_as_sent(&self) -> Option<Map<String, Value>> {
        let Some(stateless) = self.stateless.as_deref() else {
            return self.params.clone();
        };
        let mut params = self.params.clone().unwrap_or_default();
        let meta = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            for (key, raw) in stateless.fields() {
                if let Ok(value) = serde_json::from_str(raw.get()) {
                    meta.insert(key.to_owned(), value);
                }
            }
        }
        Some(params)
    }

    /// Reads `params` as `T`; absent params read as `{}`.
    ///
    /// # Errors
    /// `-32602` naming the first field that does not fit.
    pub fn parse_params<T: serde::de::DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        parse_params(self.params.as_ref())
    }

    /// Reads `params` as `T` without copying them; absent params read as
    /// `{}`.
    ///
    /// # Errors
    /// `-32602` naming the first field that does not fit.
    pub fn into_params<T: serde::de::DeserializeOwned>(self) -> Result<T, ErrorObject> {
        serde_json::from_value(Value::Object(self.params.unwrap_or_default()))
            .map_err(|err| ErrorObject::invalid_params(format!("invalid params: {err}")))
    }

    /// `params._meta.progressToken`, when the client asked for progress.
    pub fn progress_token(&self) -> Option<&Value> {
        self.params.as_ref()?.get("_meta")?.get("progressToken")
    }
}

/// Reads an optional params object as `T`; absent params read as `{}`.
///
/// # Errors
/// `-32602` naming the first field that does not fit.
pub fn parse_params<T: serde::de::DeserializeOwned>(
    params: Option<&Map<String, Value>>,
) -> Result<T, ErrorObject> {
    let value = match params {
        Some(map) => Value::Object(map.clone()),
        None => Value::Object(Map::new()),
    };
    serde_json::from_value(value)
        .map_err(|err| ErrorObject::invalid_params(format!("invalid params: {err}")))
}

fn to_object(params: impl Serialize) -> Option<Map<String, Value>> {
    match serde_json::to_value(params) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(bytes: &str) -> ErrorCode {
        decode_message(bytes.as_bytes()).unwrap_err().code
    }

    #[test]
    fn decodes_request_notification_and_response() {
        let m = decode_message(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).unwrap();
        assert!(matches!(
            m,
            Message::Request(Request {
                id: RequestId::Number(7),
                ..
            })
        ));
        let m =
            decode_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(m, Message::Notification(_)));
        let m = decode_message(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert!(matches!(
            m,
            Message::Response(Response { outcome: Ok(_), .. })
        ));
    }

    #[test]
    fn rejects_bad_envelopes_with_the_right_code() {
        assert_eq!(code("{not json"), ErrorCode::PARSE_ERROR);
        assert_eq!(code("42"), ErrorCode::INVALID_REQUEST);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"id":1,"method":"ping"}"#),
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            ErrorCode::INVALID_PARAMS
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1}"#),
            ErrorCode::INVALID_REQUEST
        );
    }

    #[test]
    fn keeps_the_id_of_a_bad_request_so_it_can_be_answered() {
        let err =
            decode_message(br#"{"jsonrpc":"2.0","id":"x","method":"m","params":3}"#).unwrap_err();
        assert_eq!(err.id, Some(RequestId::from("x")));
    }

    #[test]
    fn only_objects_are_messages() {
        // Arrays that a derived struct would read field by field.
        assert_eq!(code(r#"["2.0",1,"ping"]"#), ErrorCode::INVALID_REQUEST);
        assert_eq!(code("[4,4,444,44,44,4.2]"), ErrorCode::INVALID_REQUEST);
        assert_eq!(code("[1,"), ErrorCode::PARSE_ERROR);
        let err = decode_message(br#"{"jsonrpc":"2.0","id":1,"error":[-32000,"x"]}"#).unwrap_err();
        assert_eq!(
            (err.code, err.id),
            (ErrorCode::INVALID_REQUEST, Some(1.into()))
        );
        let Body::Batch(items) = decode_body(br#"[["2.0",1,"ping"]]"#).unwrap() else {
            panic!("not a batch");
        };
        assert_eq!(
            items[0].as_ref().unwrap_err().code,
            ErrorCode::INVALID_REQUEST
        );
    }

    #[test]
    fn the_stateless_meta_fields_leave_the_meta_map_and_come_back_on_encoding() {
        let body = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo",
            "_meta":{"progressToken":9,"io.modelcontextprotocol/protocolVersion":"2026-07-28",
            "io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},
            "io.modelcontextprotocol/clientCapabilities":{"elicitation":{}},
            "io.modelcontextprotocol/logLevel":null}}}"#;
        let Message::Request(request) = decode_message(body).unwrap() else {
            panic!("not a request");
        };
        // The other `_meta` keys stay where handlers look for them.
        assert_eq!(request.progress_token(), Some(&Value::from(9)));
        let params = request.params.as_ref().unwrap();
        assert_eq!(params["_meta"], serde_json::json!({"progressToken": 9}));
        let meta = request.stateless_meta().unwrap();
        let text = |field: &Option<Box<serde_json::value::RawValue>>| {
            field.as_deref().map(|raw| raw.get().to_owned())
        };
        assert_eq!(text(&meta.protocol_version).unwrap(), r#""2026-07-28""#);
        assert_eq!(
            text(&meta.client_capabilities).unwrap(),
            r#"{"elicitation":{}}"#
        );
        assert_eq!(text(&meta.log_level).unwrap(), "null");
        // Encoding puts them back; decoding that gives the same message.
        let json = Message::Request(request.clone()).to_json();
        let value: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            value["params"]["_meta"]["io.modelcontextprotocol/clientInfo"],
            serde_json::json!({"name": "c", "version": "1"})
        );
        assert_eq!(value["params"]["_meta"]["progressToken"], 9);
        let again = decode_message(json.as_bytes()).unwrap();
        assert_eq!(again, Message::Request(request.clone()));
        // A request built in code keeps them in its map: the same fields.
        let built = Request::new(RequestId::Number(3), "tools/call", &value["params"]);
        assert!(built.stateless.is_none());
        assert_eq!(built.stateless_meta().unwrap().as_ref(), meta.as_ref());
    }

    #[test]
    fn a_meta_of_only_stateless_fields_leaves_no_meta_and_other_shapes_stay() {
        let decode = |params: &str| {
            let body = format!(r#"{{"jsonrpc":"2.0","method":"m","params":{params}}}"#);
            match decode_message(body.as_bytes()) {
                Ok(Message::Notification(n)) => Ok(n),
                Ok(other) => panic!("not a notification: {other:?}"),
                Err(err) => Err(err.code),
            }
        };
        let only = decode(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":1}}"#).unwrap();
        assert!(!only.params.as_ref().unwrap().contains_key("_meta"));
        assert!(only.stateless_meta().unwrap().protocol_version.is_some());
        for shape in [
            r#"{"_meta":{}}"#,
            r#"{"_meta":[1,{"a":2}]}"#,
            r#"{"_meta":"x"}"#,
        ] {
            let n = decode(shape).unwrap();
            let expected: Value = serde_json::from_str(shape).unwrap();
            assert_eq!(
                Value::Object(n.params.clone().unwrap()),
                expected,
                "{shape}"
            );
            assert!(n.stateless_meta().is_none(), "{shape}");
        }
        // Escaped keys name the same members.
        let escaped =
            decode(r#"{"\u005fmeta":{"io.modelcontextprotocol\/protocolVersion":"a","k":1}}"#)
                .unwrap();
        assert!(escaped.stateless_meta().unwrap().protocol_version.is_some());
        assert_eq!(
            escaped.params.unwrap()["_meta"],
            serde_json::json!({"k": 1})
        );
        // The last `_meta` wins, whole.
        let twice =
            decode(r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"a"},"_meta":{"k":1}}"#)
                .unwrap();
        assert!(twice.stateless_meta().is_none());
        assert_eq!(twice.params.unwrap()["_meta"], serde_json::json!({"k": 1}));
        for shape in ["null", "[1]", "3", "\"x\"", "true"] {
            assert_eq!(
                decode(shape).unwrap_err(),
                ErrorCode::INVALID_PARAMS,
                "{shape}"
            );
        }
    }

    #[test]
    fn floats_survive_a_round_trip() {
        // serde_json's default float parser can be 1 ULP off (here on the
        // second decode), so a relayed number changed.
        let body =
            br#"{"jsonrpc":"2.0","id":7,"method":"m","params":{"x":-922330.172036855477808}}"#;
        let message = decode_message(body).unwrap();
        let again = decode_message(message.to_json().as_bytes()).unwrap();
        assert_eq!(again, message, "{}", message.to_json());
    }

    #[test]
    fn error_responses_may_lack_their_id_and_results_may_not() {
        for body in [
            r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        ] {
            let m = decode_message(body.as_bytes()).unwrap();
            assert!(matches!(
                m,
                Message::Response(Response {
                    id: None,
                    outcome: Err(_),
                    ..
                })
            ));
        }
        let ours = Message::Response(Response::error(None, ErrorObject::internal("x")));
        assert!(decode_message(ours.to_json().as_bytes()).is_ok());
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":null,"result":{}}"#),
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","result":{}}"#),
            ErrorCode::INVALID_REQUEST
        );
    }

    #[test]
    fn batches_decode_each_element() {
        let Body::Batch(items) =
            decode_body(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 5]"#).unwrap()
        else {
            panic!("not a batch");
        };
        assert!(items[0].is_ok());
        assert_eq!(
            items[1].as_ref().unwrap_err().code,
            ErrorCode::INVALID_REQUEST
        );
        assert_eq!(
            decode_body(b"[]").unwrap_err().code,
            ErrorCode::INVALID_REQUEST
        );
    }

    #[test]
    fn batches_over_the_limit_are_refused_whole() {
        let batch = |n: usize| {
            let items: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"ping"}}"#))
                .collect();
            format!("[{}]", items.join(","))
        };
        // At the limit: every member decoded.
        let Body::Batch(items) = decode_body_with_limit(batch(3).as_bytes(), 3).unwrap() else {
            panic!("not a batch");
        };
        assert_eq!(items.len(), 3);
        assert!(items.iter().all(Result::is_ok));
        // One over: refused, with the count and the limit, and no id.
        let err = decode_body_with_limit(batch(4).as_bytes(), 3).unwrap_err();
        assert_eq!(err.code, ErrorCode::INVALID_REQUEST);
        assert!(
            err.message.contains("batch of 4 messages"),
            "{}",
            err.message
        );
        assert!(err.message.contains("limit of 3"), "{}", err.message);
        assert_eq!(err.id, None);
        // Counted even when the members beyond the limit are not messages.
        let err = decode_body_with_limit(b"[1,2,3,4,5]", 2).unwrap_err();
        assert!(
            err.message.contains("batch of 5 messages"),
            "{}",
            err.message
        );
        // Bad JSON after the limit is still a parse error.
        let err = decode_body_with_limit(b"[1,2,3,", 2).unwrap_err();
        assert_eq!(err.code, ErrorCode::PARSE_ERROR);
        // Trailing garbage after the array is a parse error.
        let err = decode_body_with_limit(b"[1] x", 2).unwrap_err();
        assert_eq!(err.code, ErrorCode::PARSE_ERROR);
    }

    #[test]
    fn encodes_with_the_jsonrpc_member() {
        let r = Response::result(RequestId::Number(1), serde_json::json!({}));
        assert_eq!(
            Message::Response(r).to_json(),
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#
        );
    }

    #[test]
    fn shared_members_are_written_after_the_results_own_unless_it_has_them() {
        let shared = Arc::new(
            serde_json::json!({"resultType": "complete", "ttlMs": 5, "_meta": {"k": 1}})
                .as_object()
                .cloned()
                .unwrap(),
        );
        let mut response = Response::result(
            RequestId::Number(1),
            serde_json::json!({"content": [], "ttlMs": 9}),
        );
        response.shared = Some(Arc::clone(&shared));
        assert_eq!(
            Message::Response(response).to_json(),
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"ttlMs":9,"_meta":{"k":1},"resultType":"complete"}}"#
        );
        // Decoded, they are the result's own.
        let decoded = decode_message(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete"}}"#,
        )
        .unwrap();
        let Message::Response(decoded) = decoded else {
            panic!("a response")
        };
        assert_eq!(decoded.shared, None);
        assert_eq!(decoded.outcome.unwrap()["resultType"], "complete");
        // Not for an error, nor a result that is not an object.
        let mut error = Response::error(Some(RequestId::Number(2)), ErrorObject::internal("x"));
        error.shared = Some(Arc::clone(&shared));
        assert!(!Message::Response(error).to_json().contains("resultType"));
        let mut scalar = Response::result(RequestId::Number(3), serde_json::json!(7));
        scalar.shared = Some(shared);
        assert_eq!(
            Message::Response(scalar).to_json(),
            r#"{"jsonrpc":"2.0","id":3,"result":7}"#
        );
    }
}
