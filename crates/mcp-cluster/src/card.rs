//! The server card and its catalog (`[server_card]`), built once at start
//! from the configuration and what the node serves, so that every node of
//! a deployment configured alike serves the same bytes (and so the same
//! `ETag`). Served by [`mcp_cluster_http::card`].
//!
//! The card holds what the extension defines (name, version, description,
//! title, website, and with `public_url` the remotes: the Streamable HTTP
//! endpoint with every revision it speaks, the legacy HTTP+SSE one when
//! on, and an `Authorization` header when authorization is on). What the
//! extension's card no longer has a field for goes in its `_meta` under
//! [`META_KEY`]: the endpoint path, the revisions of each era, the
//! protected resource metadata's URL, and for the node's own server its
//! capabilities and, with `publish_tools`, its tools.

use mcp_cluster_http::card::{
    CARD_MEDIA_TYPE, CARD_SUFFIX, CATALOG_MEDIA_TYPE, Discovery, Published,
};
use mcp_cluster_protocol::ProtocolVersion;
use serde_json::{Map, Value, json};

use crate::NodeConfig;
use crate::config::ServerCardConfig;
use crate::served::Served;

/// The card's `$schema`: the extension's one version.
pub(crate) const SCHEMA: &str =
    "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json";
/// The card's `_meta` key for what the node adds.
pub(crate) const META_KEY: &str = "dev.mcp-cluster/node";
/// The catalog format's version.
const CATALOG_VERSION: &str = "1.0";

/// The documents of a node configured with `[server_card]`.
pub(crate) fn discovery(
    config: &NodeConfig,
    served: &Served,
    resource_metadata: Option<&str>,
) -> Option<Discovery> {
    let settings = config.server_card.as_ref()?;
    let card = card(settings, config, served, resource_metadata);
    let catalog = catalog(settings, &config.http.endpoint, &card);
    let bytes = |value: &Value| serde_json::to_vec(value).unwrap_or_default();
    Some(Discovery {
        card: Published::new(bytes(&card), CARD_MEDIA_TYPE),
        catalog: Published::new(bytes(&catalog), CATALOG_MEDIA_TYPE),
    })
}

fn card(
    settings: &ServerCardConfig,
    config: &NodeConfig,
    served: &Served,
    resource_metadata: Option<&str>,
) -> Value {
    let own = served.own_server();
    let version = settings.version.clone().unwrap_or_else(|| match own {
        Some(server) => mcp_cluster_runtime::McpService::server_info(server).version,
        None => env!("CARGO_PKG_VERSION").to_owned(),
    });
    let mut card = Map::new();
    card.insert("$schema".into(), json!(SCHEMA));
    card.insert("name".into(), json!(settings.name));
    card.insert("version".into(), json!(version));
    card.insert("description".into(), json!(settings.description));
    if let Some(title) = &settings.title {
        card.insert("title".into(), json!(title));
    }
    if let Some(url) = &settings.website_url {
        card.insert("websiteUrl".into(), json!(url));
    }
    let endpoint = &config.http.endpoint;
    if let Some(base) = &settings.public_url {
        let base = base.trim_end_matches('/');
        let headers = resource_metadata.map(|_| {
            json!([{"name": "Authorization", "isRequired": true, "isSecret": true,
                    "description": "Bearer <token>: an OAuth 2.1 access token from an authorization server the protected resource metadata names"}])
        });
        let mut remotes = vec![remote(
            "streamable-http",
            format!("{base}{endpoint}"),
            ProtocolVersion::SUPPORTED
                .iter()
                .map(|v| v.as_str())
                .collect(),
            headers.clone(),
        )];
        if config.http.legacy_sse {
            remotes.push(remote(
                "sse",
                format!("{base}{}", mcp_cluster_http::legacy::SSE_PATH),
                vec![ProtocolVersion::V2024_11_05.as_str()],
                headers,
            ));
        }
        card.insert("remotes".into(), Value::Array(remotes));
    }
    let mut node = Map::new();
    node.insert("endpoint".into(), json!(endpoint));
    node.insert(
        "eras".into(),
        json!({
            "sessions": ProtocolVersion::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
            "stateless": [ProtocolVersion::STATELESS.as_str()],
        }),
    );
    if let Some(url) = resource_metadata {
        node.insert("authorization".into(), json!({"resourceMetadata": url}));
    }
    if let Some(server) = own {
        node.insert(
            "capabilities".into(),
            serde_json::to_value(mcp_cluster_runtime::McpService::capabilities(server))
                .unwrap_or_default(),
        );
        if settings.publish_tools {
            node.insert("tools".into(), Value::Array(server.tool_summaries()));
        }
    }
    card.insert("_meta".into(), json!({ META_KEY: Value::Object(node) }));
    Value::Object(card)
}

fn remote(kind: &str, url: String, versions: Vec<&str>, headers: Option<Value>) -> Value {
    let mut remote = json!({"type": kind, "url": url, "supportedProtocolVersions": versions});
    if let Some(headers) = headers {
        remote["headers"] = headers;
    }
    remote
}

/// The catalog: one entry, the card, linked from `public_url` or held
/// inline without one.
fn catalog(settings: &ServerCardConfig, endpoint: &str, card: &Value) -> Value {
    let mut entry = json!({"identifier": identifier(&settings.name), "type": CARD_MEDIA_TYPE});
    match &settings.public_url {
        Some(base) => {
            entry["url"] = json!(format!(
                "{}{}{CARD_SUFFIX}",
                base.trim_end_matches('/'),
                endpoint.trim_end_matches('/')
            ));
        }
        None => entry["data"] = card.clone(),
    }
    json!({"specVersion": CATALOG_VERSION, "entries": [entry]})
}

/// `com.example/weather` as `urn:air:example.com:mcp:weather`.
fn identifier(name: &str) -> String {
    let (domain, rest) = name.split_once('/').unwrap_or((name, name));
    let publisher: Vec<&str> = domain.split('.').rev().collect();
    format!("urn:air:{}:mcp:{rest}", publisher.join("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identifier_turns_the_reverse_dns_name_around() {
        assert_eq!(
            identifier("com.example/weather"),
            "urn:air:example.com:mcp:weather"
        );
        assert_eq!(
            identifier("io.github.acme/a.b"),
            "urn:air:acme.github.io:mcp:a.b"
        );
    }

    #[test]
    fn the_catalog_links_the_card_or_holds_it() {
        let mut settings = ServerCardConfig {
            name: "com.example/weather".into(),
            description: "Weather".into(),
            ..ServerCardConfig::default()
        };
        let card = json!({"name": "com.example/weather"});
        let inline = catalog(&settings, "/mcp", &card);
        assert_eq!(inline["entries"][0]["data"], card);
        assert!(inline["entries"][0].get("url").is_none());
        settings.public_url = Some("https://mcp.example.com/".into());
        let linked = catalog(&settings, "/mcp", &card);
        assert_eq!(
            linked["entries"][0]["url"],
            "https://mcp.example.com/mcp/server-card"
        );
        assert_eq!(linked["specVersion"], "1.0");
        assert_eq!(
            linked["entries"][0]["type"],
            "application/mcp-server-card+json"
        );
    }
}
