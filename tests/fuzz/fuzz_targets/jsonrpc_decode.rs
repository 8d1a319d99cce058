//! Fuzz target: the JSON-RPC decoder (`decode_body`, `decode_message`).
//!
//! Invariants, for any bytes:
//! - no panic;
//! - a decoded message is a JSON object, re-encodes (`to_json`) to JSON that
//!   decodes again to an equal message, and that encoding is stable;
//! - error codes are -32700 (only for bytes that are not JSON), -32600 or
//!   -32602, and an error carries the request id whenever the body is an
//!   object with one readable id (a string or an integer);
//! - `decode_body` agrees with `decode_message` on a single message, and
//!   decodes each batch element as `decode_message` decodes it alone.
#![no_main]

use std::fmt;

use libfuzzer_sys::fuzz_target;
use mcp_cluster_protocol::jsonrpc::{Body, Message, RequestId, decode_body, decode_message};
use mcp_cluster_protocol::{DecodeError, ErrorCode};
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

fuzz_target!(|data: &[u8]| {
    let json: Option<Value> = serde_json::from_slice(data).ok();
    let single = decode_message(data);
    match &single {
        Ok(message) => {
            assert!(
                first_byte(data) == Some(b'{'),
                "decoded a message from a non-object: {message:?}"
            );
            round_trip(message);
            if let (Message::Response(r), Some(json)) = (message, &json) {
                // The member read is an object (an array would be positional).
                let member = if r.outcome.is_ok() { "result" } else { "error" };
                assert!(json.get(member).is_some(), "{member} missing");
                if r.outcome.is_err() {
                    assert!(json["error"].is_object(), "error member not an object");
                }
            }
        }
        Err(err) => check_error(data, json.as_ref(), err),
    }

    match decode_body(data) {
        Ok(Body::Single(message)) => {
            assert_eq!(Ok(&message), single.as_ref(), "decode_body disagrees");
        }
        Ok(Body::Batch(items)) => {
            assert_eq!(first_byte(data), Some(b'['), "a batch that is no array");
            let values: Vec<Box<RawValue>> =
                serde_json::from_slice(data).expect("a batch is a JSON array");
            assert!(!items.is_empty(), "an empty batch decoded");
            assert_eq!(items.len(), values.len());
            for (item, value) in items.iter().zip(&values) {
                // Each element decodes as its own JSON text would alone
                // (unless member names repeat, which JSON leaves undefined).
                let text = value.get().as_bytes();
                if serde_json::from_slice::<TopLevelKeys>(text).is_ok_and(|k| !k.unique) {
                    continue;
                }
                let alone = decode_message(text);
                match (item, &alone) {
                    (Ok(message), Ok(same)) => {
                        assert_eq!(first_byte(text), Some(b'{'));
                        assert_eq!(message, same);
                        round_trip(message);
                    }
                    (Err(a), Err(b)) => {
                        assert_eq!((a.code, &a.id), (b.code, &b.id), "batch element {value}");
                    }
                    _ => panic!("batch element {value} decoded as {item:?}, alone {alone:?}"),
                }
            }
        }
        Err(err) => {
            if first_byte(data) == Some(b'[') {
                let empty = matches!(&json, Some(Value::Array(a)) if a.is_empty());
                let expected = if empty {
                    ErrorCode::INVALID_REQUEST
                } else {
                    ErrorCode::PARSE_ERROR
                };
                assert_eq!(err.code, expected, "batch error {err:?}");
                assert_eq!(err.id, None);
            } else {
                assert_eq!(Err(&err), single.as_ref(), "decode_body disagrees");
            }
        }
    }
});

fn first_byte(data: &[u8]) -> Option<u8> {
    data.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// Re-encodes a decoded message and decodes it again.
fn round_trip(message: &Message) {
    let text = message.to_json();
    let again = decode_message(text.as_bytes())
        .unwrap_or_else(|err| panic!("re-encoded {text} does not decode: {err:?}"));
    assert_eq!(&again, message, "round trip through {text}");
    assert_eq!(again.to_json(), text, "encoding not stable");
    assert_eq!(
        decode_body(text.as_bytes()),
        Ok(Body::Single(message.clone())),
        "decode_body of {text}"
    );
}

fn check_error(data: &[u8], json: Option<&Value>, err: &DecodeError) {
    assert!(
        [
            ErrorCode::PARSE_ERROR,
            ErrorCode::INVALID_REQUEST,
            ErrorCode::INVALID_PARAMS
        ]
        .contains(&err.code),
        "unexpected code {err:?}"
    );
    if json.is_some() {
        assert_ne!(
            err.code,
            ErrorCode::PARSE_ERROR,
            "valid JSON called a parse error"
        );
    }
    if err.code == ErrorCode::PARSE_ERROR {
        assert_eq!(err.id, None);
    }
    if let Some(id) = readable_id(data, json) {
        assert_eq!(err.id.as_ref(), Some(&id), "error lost the id: {err:?}");
    }
    let object = err.to_error_object();
    assert_eq!(object.code, err.code);
}

/// The id of a body that is a JSON object with unique member names and an
/// `id` that is a string or an integer in the `i64` range.
fn readable_id(data: &[u8], json: Option<&Value>) -> Option<RequestId> {
    let Some(Value::Object(map)) = json else {
        return None;
    };
    let Ok(TopLevelKeys { unique: true }) = serde_json::from_slice::<TopLevelKeys>(data) else {
        return None;
    };
    match map.get("id")? {
        Value::String(s) => Some(RequestId::String(s.clone())),
        Value::Number(n) => n.as_i64().map(RequestId::Number),
        _ => None,
    }
}

/// Whether the member names of a JSON object are unique (serde_json's
/// `Value` keeps the last of duplicates, which hides them).
struct TopLevelKeys {
    unique: bool,
}

impl<'de> Deserialize<'de> for TopLevelKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = TopLevelKeys;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopLevelKeys, A::Error> {
                let mut seen = std::collections::HashSet::new();
                let mut unique = true;
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<IgnoredAny>()?;
                    unique &= seen.insert(key);
                }
                Ok(TopLevelKeys { unique })
            }
        }
        d.deserialize_map(Keys)
    }
}
