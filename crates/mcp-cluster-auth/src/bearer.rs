//! The `Authorization: Bearer` credential (RFC 6750 section 2.1), read the
//! same way by the resource server and by the transports that pass a
//! caller's token on. Built with or without the `verify` feature.

use crate::error::AuthError;

/// Longest token accepted, in bytes. Real access tokens are a few
/// kilobytes at most; a longer header is refused before any work.
pub const MAX_TOKEN: usize = 16 * 1024;

/// The token of a `Bearer` credential (RFC 6750 section 2.1: the scheme is
/// case-insensitive, the token is `b64token`).
///
/// # Errors
/// [`AuthError::Missing`] without a header, [`AuthError::MalformedHeader`]
/// for anything but `Bearer <b64token>`.
pub fn bearer(header: Option<&[u8]>) -> Result<&str, AuthError> {
    let header = header.ok_or(AuthError::Missing)?;
    let header = std::str::from_utf8(header).map_err(|_| AuthError::MalformedHeader)?;
    let (scheme, token) = header.split_once(' ').ok_or(AuthError::MalformedHeader)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::MalformedHeader);
    }
    let token = token.trim_matches(' ');
    let b64token = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
    if token.is_empty() || token.len() > MAX_TOKEN || !token.chars().all(b64token) {
        return Err(AuthError::MalformedHeader);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_credentials_are_parsed_strictly() {
        assert_eq!(
            bearer(Some(b"Bearer abc.def-_~+/=")).unwrap(),
            "abc.def-_~+/="
        );
        assert_eq!(bearer(Some(b"bearer abc")).unwrap(), "abc");
        assert_eq!(bearer(None).unwrap_err(), AuthError::Missing);
        for bad in [
            &b"Basic dXNlcjpwYXNz"[..],
            b"Bearer",
            b"Bearer ",
            b"Bearer a b",
            b"Bearer a\"b",
            b"Bearer \xff",
            b"abc",
        ] {
            assert_eq!(
                bearer(Some(bad)).unwrap_err(),
                AuthError::MalformedHeader,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN + 1));
        assert_eq!(
            bearer(Some(long.as_bytes())).unwrap_err(),
            AuthError::MalformedHeader
        );
    }
}
