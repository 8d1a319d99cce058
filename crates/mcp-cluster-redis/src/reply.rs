//! Decoding Redis replies without trusting their shape: anything unexpected
//! becomes [`StoreError::Corrupt`], never a panic.

use mcp_cluster_store::{Position, StoreError};
use redis::Value;

use crate::error::corrupt;

/// A text reply (bulk or simple string).
pub(crate) fn text(value: Value) -> Result<String, StoreError> {
    match value {
        Value::BulkString(bytes) => {
            String::from_utf8(bytes).map_err(|_| corrupt("reply is not UTF-8"))
        }
        Value::SimpleString(s) => Ok(s),
        other => Err(corrupt(format_args!("expected text, got {}", kind(&other)))),
    }
}

/// A text reply, or `None` for nil.
pub(crate) fn opt_text(value: Value) -> Result<Option<String>, StoreError> {
    match value {
        Value::Nil => Ok(None),
        other => text(other).map(Some),
    }
}

/// An integer reply.
pub(crate) fn int(value: &Value) -> Result<i64, StoreError> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(corrupt(format_args!(
            "expected an integer, got {}",
            kind(other)
        ))),
    }
}

/// An array reply (nil is an empty one).
pub(crate) fn array(value: Value) -> Result<Vec<Value>, StoreError> {
    match value {
        Value::Array(items) | Value::Set(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        other => Err(corrupt(format_args!(
            "expected an array, got {}",
            kind(&other)
        ))),
    }
}

/// A stream entry id.
pub(crate) fn position(value: Value) -> Result<Position, StoreError> {
    let id = text(value)?;
    id.parse()
        .map_err(|_| corrupt(format_args!("malformed stream entry id {id:?}")))
}

/// A short name of a reply's type, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Int(_) => "integer",
        Value::BulkString(_) | Value::SimpleString(_) | Value::VerbatimString { .. } => "string",
        Value::Array(_) | Value::Set(_) => "array",
        Value::Map(_) => "map",
        Value::Okay => "OK",
        Value::ServerError(_) => "error",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unexpected_shapes_are_corrupt_not_panics() {
        assert!(text(Value::Int(1)).is_err());
        assert!(text(Value::BulkString(vec![0xff])).is_err());
        assert!(int(&Value::Nil).is_err());
        assert!(array(Value::Okay).is_err());
        assert!(position(Value::BulkString(b"12".to_vec())).is_err());
        assert_eq!(
            position(Value::BulkString(b"12-3".to_vec())).unwrap(),
            Position { ms: 12, seq: 3 }
        );
        assert_eq!(opt_text(Value::Nil).unwrap(), None);
    }
}
