//! [`Secret`]: a configuration value that must never reach a log.
//!
//! The node logs its effective configuration at start (`Debug`), and a
//! configuration may be serialized (the settings tree the environment
//! variables are matched against). A field typed `Secret` prints and
//! serializes as `"<redacted>"` whatever prints it, so a new secret setting
//! is safe by its type, not by a hand-written `Debug` someone must remember
//! to extend. Reading it back takes [`Secret::expose`], which is easy to
//! look for in a review.

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

#[cfg(test)]
mod tests {
    use super::*;

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
