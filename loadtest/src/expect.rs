//! What a scenario expects of an answer beyond the protocol's rules
//! (`check.rs`): `[[operation.check]]` entries on the result, and a latency
//! limit. A check that does not hold fails the operation under its own
//! error key (`check:equals`, ...); it never counts as a success.

use anyhow::{Context, bail, ensure};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::data::DataSet;
use crate::template::{Draw, Template};

/// Longest `matches` pattern, compiled size (the regex crate's bound).
const MAX_REGEX_BYTES: usize = 1 << 20;

/// A `[[operation.check]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CheckSpec {
    /// JSON pointer (RFC 6901) into the operation's `result`; "" is the
    /// whole result.
    #[serde(default)]
    pointer: String,
    /// The value there equals this (a template).
    equals: Option<Value>,
    /// The value there is text containing this (a template).
    contains: Option<String>,
    /// The value there is text matching this regular expression.
    matches: Option<String>,
    /// There is (true) or is not (false) a value there.
    exists: Option<bool>,
}

/// A compiled check.
#[derive(Debug)]
pub(crate) struct Check {
    pointer: String,
    test: Test,
}

#[derive(Debug)]
enum Test {
    Equals(Template),
    Contains(Template),
    Matches(Regex),
    Exists(bool),
}

impl Check {
    /// Compiles `spec`; `n` numbers it in errors.
    ///
    /// # Errors
    /// Not exactly one test, a pointer that does not start with `/`, a
    /// template or pattern that does not compile.
    pub(crate) fn compile(spec: &CheckSpec, data: &[DataSet], n: usize) -> anyhow::Result<Self> {
        let what = format!("check {n}");
        ensure!(
            spec.pointer.is_empty() || spec.pointer.starts_with('/'),
            "{what}: pointer {:?} must be empty or start with /",
            spec.pointer
        );
        let test = match (&spec.equals, &spec.contains, &spec.matches, spec.exists) {
            (Some(value), None, None, None) => {
                Test::Equals(Template::compile(value, data, &format!("{what} equals"))?)
            }
            (None, Some(text), None, None) => Test::Contains(Template::compile(
                &Value::String(text.clone()),
                data,
                &format!("{what} contains"),
            )?),
            (None, None, Some(pattern), None) => Test::Matches(
                regex::RegexBuilder::new(pattern)
                    .size_limit(MAX_REGEX_BYTES)
                    .build()
                    .with_context(|| format!("{what} matches"))?,
            ),
            (None, None, None, Some(exists)) => Test::Exists(exists),
            _ => bail!("{what}: give exactly one of equals, contains, matches, exists"),
        };
        Ok(Self {
            pointer: spec.pointer.clone(),
            test,
        })
    }

    /// Holds the check against an operation's `result`.
    ///
    /// # Errors
    /// The error key of the failed test (`check:equals`, ...).
    pub(crate) fn holds(&self, result: &Value, draw: &mut Draw<'_>) -> Result<(), &'static str> {
        let found = result.pointer(&self.pointer);
        let ok = match &self.test {
            Test::Exists(exists) => found.is_some() == *exists,
            Test::Equals(expected) => {
                found.is_some_and(|found| same(found, &expected.render(draw)))
            }
            Test::Contains(needle) => {
                let needle = needle.render(draw);
                matches!((found, needle.as_str()), (Some(Value::String(text)), Some(n)) if text.contains(n))
            }
            Test::Matches(pattern) => {
                matches!(found, Some(Value::String(text)) if pattern.is_match(text))
            }
        };
        if ok { Ok(()) } else { Err(self.key()) }
    }

    fn key(&self) -> &'static str {
        match self.test {
            Test::Equals(_) => "check:equals",
            Test::Contains(_) => "check:contains",
            Test::Matches(_) => "check:matches",
            Test::Exists(_) => "check:exists",
        }
    }
}

/// JSON equality with numbers compared by value: `5` and `5.0` are the
/// same number (servers differ in how they write one), objects regardless
/// of key order.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            },
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use serde_json::json;

    use super::*;

    fn check(toml: &str) -> anyhow::Result<Check> {
        Check::compile(&toml::from_str(toml).unwrap(), &[], 1)
    }

    #[test]
    fn each_test_holds_or_names_itself() {
        let result = json!({"content": [{"type": "text", "text": "Sunny in Paris"}],
                            "structuredContent": {"temp": 21}});
        let counter = AtomicU64::new(0);
        let mut draw = Draw::new(&[], 0, &counter);
        let mut run = |toml: &str| check(toml).unwrap().holds(&result, &mut draw);
        assert_eq!(
            run("pointer = \"/structuredContent/temp\"\nequals = 21"),
            Ok(())
        );
        assert_eq!(
            run("pointer = \"/structuredContent/temp\"\nequals = \"21\""),
            Err("check:equals")
        );
        assert_eq!(
            run("pointer = \"/content/0/text\"\ncontains = \"Paris\""),
            Ok(())
        );
        assert_eq!(
            run("pointer = \"/content/0/text\"\ncontains = \"Lima\""),
            Err("check:contains")
        );
        assert_eq!(
            run("pointer = \"/content/0/text\"\nmatches = \"^Sunny in \\\\w+$\""),
            Ok(())
        );
        assert_eq!(
            run("pointer = \"/structuredContent/temp\"\nmatches = \"21\""),
            Err("check:matches")
        );
        assert_eq!(run("pointer = \"/isError\"\nexists = false"), Ok(()));
        assert_eq!(
            run("pointer = \"/content/1\"\nexists = true"),
            Err("check:exists")
        );
        assert_eq!(
            run("equals = { temp = 21 }\npointer = \"/structuredContent\""),
            Ok(())
        );
        // 21 and 21.0 are one number.
        assert_eq!(
            run("pointer = \"/structuredContent/temp\"\nequals = 21.0"),
            Ok(())
        );
        assert_eq!(
            run("pointer = \"/structuredContent/temp\"\nequals = 21.5"),
            Err("check:equals")
        );
    }

    #[test]
    fn a_check_needs_exactly_one_test_and_a_good_pointer_and_pattern() {
        for bad in [
            "pointer = \"/a\"",
            "pointer = \"/a\"\nequals = 1\nexists = true",
            "pointer = \"a\"\nequals = 1",
            "matches = \"(\"",
            "equals = \"{{nope}}\"",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }
}
