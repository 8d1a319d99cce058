//! Stateless, opaque pagination cursors: the offset of the next page,
//! base64url-encoded, so any node can continue a listing another started.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_protocol::ErrorObject;

const PREFIX: &str = "o:";

/// Encodes the offset of the next page.
pub fn encode(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("{PREFIX}{offset}"))
}

/// Decodes a cursor; an absent cursor is the first page.
///
/// # Errors
/// `-32602` for a cursor this server did not mint (pagination: invalid
/// cursors SHOULD get invalid params).
pub fn decode(cursor: Option<&str>) -> Result<usize, ErrorObject> {
    let Some(cursor) = cursor else { return Ok(0) };
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.strip_prefix(PREFIX).and_then(|n| n.parse().ok()))
        .ok_or_else(|| ErrorObject::invalid_params("invalid cursor"))
}

/// One page of `items` from a cursor: the page and the next cursor (`""` at
/// the end).
///
/// # Errors
/// `-32602` for an invalid cursor or one past the end.
pub fn page<T: Clone>(
    items: &[T],
    cursor: Option<&str>,
    page_size: usize,
) -> Result<(Vec<T>, String), ErrorObject> {
    let start = decode(cursor)?;
    if start > items.len() || (start == items.len() && start != 0) {
        return Err(ErrorObject::invalid_params("invalid cursor"));
    }
    let end = (start + page_size.max(1)).min(items.len());
    let next = if end < items.len() {
        encode(end)
    } else {
        String::new()
    };
    Ok((items[start..end].to_vec(), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_every_item_once_and_end_with_an_empty_cursor() {
        let items: Vec<u32> = (0..7).collect();
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        loop {
            let (page, next) = page(&items, cursor.as_deref(), 3).unwrap();
            seen.extend(page);
            if next.is_empty() {
                break;
            }
            cursor = Some(next);
        }
        assert_eq!(seen, items);
    }

    #[test]
    fn foreign_cursors_are_invalid_params() {
        for bad in ["", "xyz", "%%%", &encode(99)] {
            let err = page(&[1, 2], Some(bad), 10).unwrap_err();
            assert_eq!(err.code, mcp_protocol::ErrorCode::INVALID_PARAMS, "{bad}");
        }
    }
}
