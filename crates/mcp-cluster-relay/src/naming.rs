//! [`Naming`]: how the names of one upstream look behind a federation,
//! both ways. Tool and prompt names get `{upstream}{separator}` in front;
//! resource URIs get a scheme of the upstream's own in front
//! (`{upstream}+file:///a`, the upstream's name in lower case with `_` as
//! `-`), so that two upstreams serving `file:///a` stay apart and every
//! URI the client sees leads back to one upstream and its own URI. An
//! upstream configured with `prefix = false` keeps its names and URIs.

use mcp_cluster_protocol::methods;
use serde_json::{Map, Value};

/// How one upstream's names look to clients of the federation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Naming {
    /// In front of its tool and prompt names; empty: names as they are.
    prefix: String,
    /// In front of its resource URIs and URI templates; empty: as they are.
    uri_prefix: String,
}

impl Naming {
    /// The naming of upstream `name`: prefixed with `separator`, or not.
    pub(crate) fn new(name: &str, separator: &str, prefixed: bool) -> Self {
        if !prefixed {
            return Self::default();
        }
        Self {
            prefix: format!("{name}{separator}"),
            uri_prefix: format!("{}+", uri_scheme(name)),
        }
    }

    /// Whether names pass as they are.
    pub(crate) fn is_plain(&self) -> bool {
        self.prefix.is_empty()
    }

    /// The tool or prompt name clients see.
    pub(crate) fn expose_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The upstream's own name for `exposed`, when it is one of this
    /// upstream's (a plain naming claims every name).
    pub(crate) fn inner_name<'a>(&self, exposed: &'a str) -> Option<&'a str> {
        exposed.strip_prefix(self.prefix.as_str())
    }

    /// The URI clients see.
    pub(crate) fn expose_uri(&self, uri: &str) -> String {
        format!("{}{uri}", self.uri_prefix)
    }

    /// The upstream's own URI for `exposed`, when it is one of this
    /// upstream's (schemes compare without regard to case).
    pub(crate) fn inner_uri<'a>(&self, exposed: &'a str) -> Option<&'a str> {
        let n = self.uri_prefix.len();
        match exposed.get(..n) {
            Some(head) if head.eq_ignore_ascii_case(&self.uri_prefix) => exposed.get(n..),
            _ => None,
        }
    }

    /// The prefix of the tool and prompt names, to compare namings.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prefix of the URIs, to compare namings.
    pub(crate) fn uri_prefix(&self) -> &str {
        &self.uri_prefix
    }

    /// A result of the upstream's as the client sees it: the names and
    /// URIs in it exposed (lists, the contents read, resource links in a
    /// tool's result or a prompt's messages).
    pub(crate) fn expose_result(&self, method: &str, result: &mut Value) {
        if self.is_plain() {
            return;
        }
        let each = |result: &mut Value, list: &str, f: &mut dyn FnMut(&mut Value)| {
            if let Some(items) = result.get_mut(list).and_then(Value::as_array_mut) {
                items.iter_mut().for_each(f);
            }
        };
        match method {
            methods::TOOLS_LIST => each(result, "tools", &mut |t| self.map_name(t, "name")),
            methods::PROMPTS_LIST => each(result, "prompts", &mut |p| self.map_name(p, "name")),
            methods::RESOURCES_LIST => each(result, "resources", &mut |r| self.map_uri(r, "uri")),
            methods::RESOURCES_TEMPLATES_LIST => each(result, "resourceTemplates", &mut |r| {
                self.map_uri(r, "uriTemplate");
            }),
            methods::RESOURCES_READ => each(result, "contents", &mut |c| self.map_uri(c, "uri")),
            methods::TOOLS_CALL => each(result, "content", &mut |c| self.map_content(c)),
            methods::PROMPTS_GET => each(result, "messages", &mut |m| {
                if let Some(content) = m.get_mut("content") {
                    self.map_content(content);
                }
            }),
            _ => {}
        }
    }

    /// A notification of the upstream's as the client sees it (the URI of
    /// `notifications/resources/updated`).
    pub(crate) fn expose_notification(
        &self,
        method: &str,
        params: Option<&mut Map<String, Value>>,
    ) {
        if method != methods::NOTIFICATION_RESOURCES_UPDATED || self.is_plain() {
            return;
        }
        if let Some(Value::String(uri)) = params.and_then(|p| p.get_mut("uri")) {
            *uri = self.expose_uri(uri);
        }
    }

    fn map_name(&self, item: &mut Value, key: &str) {
        if let Some(Value::String(name)) = item.get_mut(key) {
            *name = self.expose_name(name);
        }
    }

    fn map_uri(&self, item: &mut Value, key: &str) {
        if let Some(Value::String(uri)) = item.get_mut(key) {
            *uri = self.expose_uri(uri);
        }
    }

    /// A content block: a resource link's URI, an embedded resource's.
    fn map_content(&self, content: &mut Value) {
        match content.get("type").and_then(Value::as_str) {
            Some("resource_link") => self.map_uri(content, "uri"),
            Some("resource") => {
                if let Some(resource) = content.get_mut("resource") {
                    self.map_uri(resource, "uri");
                }
            }
            _ => {}
        }
    }
}

/// The URI scheme prefix of upstream `name`: a URI scheme starts with a
/// letter and holds letters, digits, `+`, `-` and `.` (RFC 3986, 3.1).
fn uri_scheme(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// Whether `name` can name an upstream's URI scheme (it starts with a
/// letter).
pub(crate) fn has_uri_scheme(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_and_uris_go_out_prefixed_and_come_back_as_they_were() {
        let n = Naming::new("Files_A", "_", true);
        assert_eq!(n.expose_name("read"), "Files_A_read");
        assert_eq!(n.inner_name("Files_A_read"), Some("read"));
        assert_eq!(n.inner_name("other_read"), None);
        let uri = n.expose_uri("file:///etc/hosts");
        assert_eq!(uri, "files-a+file:///etc/hosts");
        assert_eq!(n.inner_uri(&uri), Some("file:///etc/hosts"));
        assert_eq!(n.inner_uri("FILES-A+file:///x"), Some("file:///x"));
        assert_eq!(n.inner_uri("file:///x"), None);

        let plain = Naming::new("b", "_", false);
        assert!(plain.is_plain());
        assert_eq!(plain.inner_name("read"), Some("read"));
        assert_eq!(plain.inner_uri("file:///x"), Some("file:///x"));
    }

    #[test]
    fn results_carry_exposed_names_wherever_a_client_reads_one() {
        let n = Naming::new("a", ".", true);
        let mut listed = json!({"tools": [{"name": "echo"}], "nextCursor": "2"});
        n.expose_result(methods::TOOLS_LIST, &mut listed);
        assert_eq!(
            listed,
            json!({"tools": [{"name": "a.echo"}], "nextCursor": "2"})
        );
        let mut called = json!({"content": [
            {"type": "text", "text": "file:///x"},
            {"type": "resource_link", "uri": "file:///x", "name": "x"},
            {"type": "resource", "resource": {"uri": "file:///y", "text": ""}},
        ]});
        n.expose_result(methods::TOOLS_CALL, &mut called);
        assert_eq!(called["content"][0]["text"], "file:///x");
        assert_eq!(called["content"][1]["uri"], "a+file:///x");
        assert_eq!(called["content"][2]["resource"]["uri"], "a+file:///y");
        let mut templates = json!({"resourceTemplates": [{"uriTemplate": "db://{table}"}]});
        n.expose_result(methods::RESOURCES_TEMPLATES_LIST, &mut templates);
        assert_eq!(
            templates["resourceTemplates"][0]["uriTemplate"],
            "a+db://{table}"
        );
        let mut params = json!({"uri": "file:///x"});
        n.expose_notification(
            methods::NOTIFICATION_RESOURCES_UPDATED,
            params.as_object_mut(),
        );
        assert_eq!(params["uri"], "a+file:///x");
    }
}
