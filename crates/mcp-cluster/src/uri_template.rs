//! Matching URIs against RFC 6570 level-1 templates (`{var}` expansions),
//! which is what MCP resource templates use in practice.

use std::collections::BTreeMap;

/// A parsed template: literal parts and variable names, alternating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Var(String),
}

/// A template that is not `{var}`-only level 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported URI template: {0}")]
pub struct TemplateError(String);

impl UriTemplate {
    /// Parses a template.
    ///
    /// # Errors
    /// Unbalanced braces, empty or operator-prefixed variables, or two
    /// variables with no literal between them.
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        let err = || TemplateError(template.to_owned());
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            } else if matches!(parts.last(), Some(Part::Var(_))) {
                return Err(err());
            }
            let close = rest[open..].find('}').ok_or_else(err)? + open;
            let name = &rest[open + 1..close];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(err());
            }
            parts.push(Part::Var(name.to_owned()));
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err(err());
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self { parts })
    }

    /// The variables' values when `uri` matches. A variable matches one or
    /// more characters other than `/`.
    pub fn matches(&self, uri: &str) -> Option<BTreeMap<String, String>> {
        let mut vars = BTreeMap::new();
        let mut rest = uri;
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(lit) => rest = rest.strip_prefix(lit.as_str())?,
                Part::Var(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        _ => rest.len(),
                    };
                    let value = &rest[..end];
                    if value.is_empty() || value.contains('/') {
                        return None;
                    }
                    vars.insert(name.clone(), value.to_owned());
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }

    /// The variable names, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v.as_str()),
            Part::Literal(_) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_level_one_templates() {
        let t = UriTemplate::parse("test://template/{id}/data").unwrap();
        let vars = t.matches("test://template/123/data").unwrap();
        assert_eq!(vars["id"], "123");
        assert!(t.matches("test://template/1/2/data").is_none());
        assert!(t.matches("test://template//data").is_none());
        assert!(t.matches("test://other/123/data").is_none());
        assert_eq!(t.variables().collect::<Vec<_>>(), vec!["id"]);
    }

    #[test]
    fn rejects_what_it_cannot_match_exactly() {
        assert!(UriTemplate::parse("a/{x}{y}").is_err());
        assert!(UriTemplate::parse("a/{+x}").is_err());
        assert!(UriTemplate::parse("a/{x").is_err());
        assert!(UriTemplate::parse("a/x}").is_err());
    }
}
