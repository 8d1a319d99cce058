//! [`Secret`]: a configuration value that must never reach a log; and
//! [`redacted_url`], [`url_scheme_and_host`]: a URL that may hold one.
//!
//! The node logs its effective configuration at start (`Debug`), and a
//! configuration may be serialized (the settings tree the environment
//! variables are matched against). A field typed `Secret` prints and
//! serializes as `"<redacted>"` whatever prints it, so a new secret setting
//! is safe by its type, not by a hand-written `Debug` someone must remember
//! to extend. Reading it back takes [`Secret::expose`], which is easy to
//! look for in a review.
//!
//! A URL setting (Redis's, an OTLP endpoint) is not a secret as a whole,
//! but it may carry one: a password in its user info, or in its query
//! (`?password=`, which some clients read and others ignore). Logs and
//! error messages print it through [`redacted_url`]. A URL whose parts
//! cannot be told apart for certain (a password with an unencoded `/`,
//! `?` or `#` ends the host early; a mistyped `redis//`) prints as
//! [`url_scheme_and_host`]: its scheme and host when they can be found
//! with nothing of the rest, else [`UNPARSABLE_URL`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a [`Secret`] prints and serializes as.
pub const REDACTED: &str = "<redacted>";

/// A secret setting (a password, a client secret, a key): deserialized from
/// a plain string; `Debug`, `Display` and `Serialize` give `"<redacted>"`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that uses it (never a log).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(REDACTED, f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self)
    }
}

/// What a URL prints as when not even its scheme and host can be told
/// apart from what may be a secret.
pub const UNPARSABLE_URL: &str = "(unparsable)";

/// What a password or a query value of a URL prints as.
const HIDDEN: &str = "***";

/// Query keys whose values say how to talk to a server, never who may:
/// shown as they are.
const SHOWN_QUERY_KEYS: &[&str] = &["protocol", "db"];

/// A fragment shown as it is: `rediss://…#insecure` turns certificate
/// checks off, which an operator reading the log must see.
const SHOWN_FRAGMENT: &str = "insecure";

/// `url` for a log line or an error message: the password of its user
/// info as `***` (all of the user info when it has no `:`, as a password
/// given without a user), every query value but `protocol` and `db` as
/// `***`, and a fragment other than `insecure` as `***`. Hosts (several,
/// comma-separated, as Sentinel and Redis Cluster URLs list them), ports
/// and the path are shown.
///
/// When its parts cannot be told apart for certain (no `scheme://`, an
/// `@` after the host, hosts that are not `host[:port]`), it prints as
/// [`url_scheme_and_host`] does.
pub fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = split_scheme(url) else {
        return UNPARSABLE_URL.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    // An `@` after the host: a password holding an unencoded `/`, `?` or
    // `#` ended the host early, and what looks like the path is a secret.
    if tail.contains('@') {
        return url_scheme_and_host(url);
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    // No host at all is a path-only URL (`redis+unix:///run/redis.sock`).
    let path_only = hosts.is_empty() && tail.starts_with('/');
    if !path_only && !is_host_list(hosts) {
        return url_scheme_and_host(url);
    }
    let mut shown = format!("{scheme}://");
    match userinfo.map(|userinfo| userinfo.split_once(':')) {
        None => {}
        Some(Some((user, _))) => {
            shown.push_str(user);
            shown.push(':');
            shown.push_str(HIDDEN);
            shown.push('@');
        }
        Some(None) => {
            shown.push_str(HIDDEN);
            shown.push('@');
        }
    }
    shown.push_str(hosts);
    let (before_fragment, fragment) = match tail.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (tail, None),
    };
    let (path, query) = match before_fragment.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (before_fragment, None),
    };
    shown.push_str(path);
    if let Some(query) = query {
        shown.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, value)) if SHOWN_QUERY_KEYS.contains(&key) => format!("{key}={value}"),
                Some((key, _)) => format!("{key}={HIDDEN}"),
                None => HIDDEN.to_owned(),
            })
            .collect();
        shown.push_str(&pairs.join("&"));
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        shown.push_str(if fragment == SHOWN_FRAGMENT {
            fragment
        } else {
            HIDDEN
        });
    }
    shown
}

/// A URL that does not parse, for an error message: `scheme://host[:port]`
/// (or several hosts) when both can be told apart from anything that may
/// be a secret, else [`UNPARSABLE_URL`]. The host is what follows the last
/// `@` (a password may hold any character; the host none of `@/?#`), up to
/// the path; there must be no `?` or `#` before that `@` (the `@` could
/// then be in a query), and it must read as `host[:port]`.
pub fn url_scheme_and_host(url: &str) -> String {
    let Some((scheme, rest)) = split_scheme(url) else {
        return UNPARSABLE_URL.to_owned();
    };
    let after = match rest.rfind('@') {
        Some(at) if rest[..at].contains(['?', '#']) => return UNPARSABLE_URL.to_owned(),
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    let host = &after[..after.find(['/', '?', '#']).unwrap_or(after.len())];
    if is_host_list(host) {
        format!("{scheme}://{host}")
    } else {
        UNPARSABLE_URL.to_owned()
    }
}

/// `scheme` and what follows `scheme://`, when the URL starts with a
/// scheme (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some((scheme, rest))
}

/// Whether `text` is one or more comma-separated `host[:port]`: a name or
/// IPv4 address, or a bracketed IPv6 address, and a port of digits.
fn is_host_list(text: &str) -> bool {
    !text.is_empty() && text.split(',').all(is_host_port)
}

fn is_host_port(text: &str) -> bool {
    let (host_ok, port) = match text.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((v6, after)) => (
                !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':'),
                after,
            ),
            None => return false,
        },
        None => {
            let (host, port) = text.find(':').map_or((text, ""), |i| text.split_at(i));
            (
                !host.is_empty()
                    && host
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
                port,
            )
        }
    };
    host_ok
        && (port.is_empty()
            || port.strip_prefix(':').is_some_and(|digits| {
                !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
            }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_shows_its_hosts_and_path_never_a_password_or_query_value() {
        for (url, shown) in [
            (
                "redis://:s3cret@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            ("redis://me:s3cret@127.0.0.1", "redis://me:***@127.0.0.1"),
            ("redis://s3cret@127.0.0.1", "redis://***@127.0.0.1"),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("redis://u:p%2Fs3cret@h:1", "redis://u:***@h:1"),
            ("redis://u:p@s3cret@h:1/2", "redis://u:***@h:1/2"),
            (
                "redis://127.0.0.1:6379/?password=s3cret",
                "redis://127.0.0.1:6379/?password=***",
            ),
            (
                "redis://h/0?protocol=resp3&pass=s3cret&s3cret",
                "redis://h/0?protocol=resp3&pass=***&***",
            ),
            ("rediss://h:6380/#insecure", "rediss://h:6380/#insecure"),
            ("rediss://h:6380/#s3cret", "rediss://h:6380/#***"),
            (
                "redis+sentinel://u:s3cret@a:26379,[::1]:26380,b/mymaster/2",
                "redis+sentinel://u:***@a:26379,[::1]:26380,b/mymaster/2",
            ),
            (
                "rediss+cluster://u:s3cret@a:7000,b:7001",
                "rediss+cluster://u:***@a:7000,b:7001",
            ),
            (
                "redis+unix:///run/redis.sock?db=1&pass=s3cret",
                "redis+unix:///run/redis.sock?db=1&pass=***",
            ),
            (
                "http://user:s3cret@collector:4318",
                "http://user:***@collector:4318",
            ),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
    }

    #[test]
    fn a_url_that_cannot_be_read_shows_its_scheme_and_host_or_nothing() {
        for (url, shown) in [
            // A `/`, `?` or `#` in the password ends the host early.
            ("redis://:ab/cd+ef==@127.0.0.1:1", "redis://127.0.0.1:1"),
            ("rediss://u:s3/cret@h:6380/0", "rediss://h:6380"),
            (
                "redis+sentinel://u:s3/cret@a:1,b:2/m",
                "redis+sentinel://a:1,b:2",
            ),
            ("redis+cluster://u:s3/cret@a:1", "redis+cluster://a:1"),
            ("redis://u:s3?cret@h:1", UNPARSABLE_URL),
            ("redis://u:s3#cret@h:1", UNPARSABLE_URL),
            // A mistyped scheme.
            ("redis//:s3cret@127.0.0.1:1", UNPARSABLE_URL),
            ("redis:/:s3cret@127.0.0.1:1", UNPARSABLE_URL),
            ("redis:s3cret@h", UNPARSABLE_URL),
            // An `@` in a query is no end of user info.
            ("redis://h:1/?password=s3c@ret", UNPARSABLE_URL),
            // No host, or one that is not host[:port].
            ("redis://:s3cret", UNPARSABLE_URL),
            ("redis://u:s3cret", UNPARSABLE_URL),
            ("redis://u:s3cret@", UNPARSABLE_URL),
            ("redis://u:s3cret@h:port", UNPARSABLE_URL),
            ("", UNPARSABLE_URL),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
            assert!(!url_scheme_and_host(url).contains("s3"), "{url}");
        }
        assert_eq!(
            url_scheme_and_host("redis://u:s3cret@h:1/0?protocol=resp3"),
            "redis://h:1"
        );
    }

    #[test]
    fn a_secret_never_prints_or_serializes_its_value() {
        let s = Secret::from("hunter2");
        assert_eq!(format!("{s:?}"), "\"<redacted>\"");
        assert_eq!(format!("{s}"), "<redacted>");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"<redacted>\"");
        assert_eq!(format!("{:?}", vec![s.clone()]), "[\"<redacted>\"]");
        assert_eq!(s.expose(), "hunter2");
        let back: Secret = serde_json::from_str("\"hunter2\"").unwrap();
        assert_eq!(back, s);
    }
}
