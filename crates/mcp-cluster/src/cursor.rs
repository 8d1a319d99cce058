//! Stateless, opaque pagination cursors: the offset of the next page,
//! base64url-encoded, so any node can continue a listing another started.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_cluster_protocol::ErrorObject;

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

/// One page of `items` from a cursor: the page and the next cursor, `None`
/// on the last page (pagination: `nextCursor` is present only if more
/// results exist; clients follow any cursor that is present).
///
/// # Errors
/// `-32602` for an invalid cursor or one past the end.
pub fn page<T: Clone>(
    items: &[T],
    cursor: Option<&str>,
    page_size: usize,
) -> Result<(Vec<T>, Option<String>), ErrorObject> {
    let start = decode(cursor)?;
    if start > items.len() || (start == items.len() && start != 0) {
        return Err(ErrorObject::invalid_params("invalid cursor"));
    }
    let end = (start + page_size.max(1)).min(items.len());
    let next = (end < items.len()).then(|| encode(end));
    Ok((items[start..end].to_vec(), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cover_every_item_once_and_the_last_has_no_cursor() {
        let items: Vec<u32> = (0..7).collect();
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let (page, next) = page(&items, cursor.as_deref(), 3).unwrap();
            seen.extend(page);
            pages += 1;
            match next {
                Some(next) => {
                    assert!(!next.is_empty(), "a present cursor is never empty");
                    cursor = Some(next);
                }
                None => break,
            }
        }
        assert_eq!(seen, items);
        assert_eq!(pages, 3);
        // A list that fits one page, and an empty list, have no cursor.
        assert_eq!(page(&items, None, 7).unwrap().1, None);
        assert_eq!(page::<u32>(&[], None, 3).unwrap(), (vec![], None));
    }

    #[test]
    fn foreign_cursors_are_invalid_params() {
        for bad in ["", "xyz", "%%%", &encode(99)] {
            let err = page(&[1, 2], Some(bad), 10).unwrap_err();
            assert_eq!(
                err.code,
                mcp_cluster_protocol::ErrorCode::INVALID_PARAMS,
                "{bad}"
            );
        }
    }
}
