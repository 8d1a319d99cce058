//! The server card (the experimental Server Card extension) as operators
//! run it: `[server_card]` in the configuration of two nodes. Both serve the
//! same bytes at `<endpoint>/server-card` with the same strong `ETag`, a
//! `304` for it from either node, CORS for any origin; the card holds to the
//! extension's schema (its rules written out below: the schema is not
//! published where the test command could install it from); the catalog
//! at `/.well-known/ai-catalog.json` and `/.well-known/mcp/catalog.json`
//! links it; published tools are those `tools/list` gives; with
//! authorization on, the card is public and names the metadata. A node
//! without `[server_card]` serves neither; a bad card setting exits 64.

mod auth_support;

use std::path::PathBuf;

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{Cluster, TestIssuer, node_binary, within};
use serde_json::{Value, json};

const CARD_TYPE: &str = "application/mcp-server-card+json";

/// The Server Card format's rules (the extension's `ServerCard`,
/// `Remote`, `KeyValueInput` and `Icon`), as JSON Schema 2020-12.
fn card_schema() -> Value {
    let input = json!({
        "type": "object",
        "properties": {
            "description": {"type": "string"}, "isRequired": {"type": "boolean"},
            "isSecret": {"type": "boolean"}, "default": {"type": "string"},
            "value": {"type": "string"}, "placeholder": {"type": "string"},
            "format": {"enum": ["string", "number", "boolean", "filepath"]},
            "choices": {"type": "array", "items": {"type": "string"}}
        }
    });
    let mut header = input.clone();
    header["required"] = json!(["name"]);
    header["properties"]["name"] = json!({"type": "string"});
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["$schema", "name", "version", "description"],
        "properties": {
            "$schema": {"const": "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"},
            "name": {"type": "string", "minLength": 3, "maxLength": 200,
                     "pattern": "^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$"},
            "version": {"type": "string", "maxLength": 255},
            "description": {"type": "string", "minLength": 1, "maxLength": 100},
            "title": {"type": "string", "minLength": 1, "maxLength": 100},
            "websiteUrl": {"type": "string", "format": "uri"},
            "icons": {"type": "array", "items": {"type": "object", "required": ["src"]}},
            "remotes": {"type": "array", "items": {
                "type": "object",
                "required": ["type", "url"],
                "properties": {
                    "type": {"enum": ["streamable-http", "sse"]},
                    "url": {"type": "string",
                            "pattern": "^(https?://[^\\s]+|\\{[a-zA-Z_][a-zA-Z0-9_]*\\}[^\\s]*)$"},
                    "headers": {"type": "array", "items": header},
                    "variables": {"type": "object", "additionalProperties": input},
                    "supportedProtocolVersions": {"type": "array", "items": {"type": "string"}}
                }
            }},
            "_meta": {"type": "object"}
        }
    })
}

fn config(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("server-card-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

const CARD_CONFIG: &str = r#"
[server_card]
name = "com.example/weather"
description = "Weather forecasts for any city"
title = "Weather"
website_url = "https://example.com/weather"
public_url = "https://mcp.example.com"
publish_tools = true
"#;

/// GET `url` with `headers`: status, headers, body.
async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut request = reqwest::Client::new().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = within("GET", request.send()).await.unwrap();
    let status = answer.status().as_u16();
    let headers = answer.headers().clone();
    (status, headers, answer.bytes().await.unwrap().to_vec())
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} in {headers:?}"))
}

/// `http://127.0.0.1:port` of a node URL (`.../mcp`).
fn origin(url: &str) -> &str {
    url.strip_suffix("/mcp").unwrap()
}

#[tokio::test]
async fn every_node_serves_the_same_card_with_one_tag_and_the_catalog_links_it() {
    let path = config("two", CARD_CONFIG);
    let cluster = Cluster::start(2, &["--config", path.to_str().unwrap()]).unwrap();
    let (a, b) = (cluster.node_url(0), cluster.node_url(1));

    let (status, headers, body) = get(&format!("{a}/server-card"), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "content-type"), CARD_TYPE);
    assert_eq!(header(&headers, "cache-control"), "public, max-age=3600");
    assert_eq!(header(&headers, "access-control-allow-origin"), "*");
    assert_eq!(header(&headers, "access-control-expose-headers"), "ETag");
    let tag = header(&headers, "etag").to_owned();
    assert!(
        tag.starts_with('"') && !tag.starts_with("W/"),
        "strong: {tag}"
    );
    let (_, other_headers, other_body) = get(&format!("{b}/server-card"), &[]).await;
    assert_eq!(other_body, body, "the same bytes on every node");
    assert_eq!(header(&other_headers, "etag"), tag);

    // The tag one node gave is not modified on the other.
    let (status, headers, empty) = get(
        &format!("{b}/server-card"),
        &[("if-none-match", tag.as_str())],
    )
    .await;
    assert_eq!(status, 304);
    assert!(empty.is_empty());
    assert_eq!(header(&headers, "etag"), tag);
    let (status, _, _) = get(&format!("{b}/server-card"), &[("if-none-match", "\"x\"")]).await;
    assert_eq!(status, 200);

    // A browser's preflight.
    let preflight = reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, format!("{a}/server-card"))
        .header("origin", "https://registry.example")
        .header("access-control-request-headers", "if-none-match")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), 204);
    assert_eq!(
        header(preflight.headers(), "access-control-allow-headers"),
        "Content-Type, If-None-Match"
    );

    // The card holds to the format, and says what the node serves.
    let card: Value = serde_json::from_slice(&body).unwrap();
    let validator = jsonschema::validator_for(&card_schema()).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&card)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}\n{card:#}");
    assert_eq!(card["name"], "com.example/weather");
    assert_eq!(card["remotes"][0]["type"], "streamable-http");
    assert_eq!(card["remotes"][0]["url"], "https://mcp.example.com/mcp");
    assert_eq!(
        card["remotes"][0]["supportedProtocolVersions"],
        json!([
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05"
        ])
    );
    assert_eq!(card["remotes"][1]["type"], "sse");
    assert_eq!(card["remotes"][1]["url"], "https://mcp.example.com/sse");
    assert!(
        card["remotes"][0].get("headers").is_none(),
        "no authorization: {card}"
    );
    let node = &card["_meta"]["dev.mcp-cluster/node"];
    assert_eq!(node["endpoint"], "/mcp");
    assert_eq!(node["eras"]["stateless"], json!(["2026-07-28"]));
    assert_eq!(node["capabilities"]["tools"]["listChanged"], true);

    // The tools it publishes are those a client lists, in order.
    let mut client = Client::new(&a, "2025-11-25");
    client.initialize(json!({})).await.unwrap();
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let (page, _) = client.request("tools/list", params).await.unwrap();
        for tool in page["result"]["tools"].as_array().unwrap() {
            listed.push(tool["name"].clone());
        }
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let published: Vec<Value> = node["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(published, listed);

    // The catalog, at both paths, the same document, linking the card.
    let (status, headers, catalog) =
        get(&format!("{}/.well-known/ai-catalog.json", origin(&b)), &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "content-type"),
        "application/ai-catalog+json"
    );
    let (_, _, same) = get(&format!("{}/.well-known/mcp/catalog.json", origin(&a)), &[]).await;
    assert_eq!(same, catalog);
    let catalog: Value = serde_json::from_slice(&catalog).unwrap();
    assert_eq!(
        catalog,
        json!({"specVersion": "1.0", "entries": [{
            "identifier": "urn:air:example.com:mcp:weather",
            "type": CARD_TYPE,
            "url": "https://mcp.example.com/mcp/server-card"}]})
    );
}

#[tokio::test]
async fn without_a_public_url_the_catalog_holds_the_card_and_without_a_card_nothing_is_served() {
    let path = config(
        "inline",
        "[server_card]\nname = \"com.example/notes\"\ndescription = \"Notes\"\n",
    );
    let cluster = Cluster::start(1, &["--config", path.to_str().unwrap()]).unwrap();
    let url = cluster.node_url(0);
    let (_, _, body) = get(&format!("{url}/server-card"), &[]).await;
    let card: Value = serde_json::from_slice(&body).unwrap();
    assert!(card.get("remotes").is_none(), "{card}");
    assert!(
        card["_meta"]["dev.mcp-cluster/node"].get("tools").is_none(),
        "{card}"
    );
    let (_, _, catalog) = get(
        &format!("{}/.well-known/ai-catalog.json", origin(&url)),
        &[],
    )
    .await;
    let catalog: Value = serde_json::from_slice(&catalog).unwrap();
    assert_eq!(catalog["entries"][0]["data"], card);

    let plain = Cluster::start(1, &[]).unwrap();
    let url = plain.node_url(0);
    for path in [
        format!("{url}/server-card"),
        format!("{}/.well-known/ai-catalog.json", origin(&url)),
        format!("{}/.well-known/mcp/catalog.json", origin(&url)),
    ] {
        assert_eq!(get(&path, &[]).await.0, 404, "{path}");
    }
}

#[tokio::test]
async fn with_authorization_on_the_card_is_public_and_names_the_metadata() {
    let issuer = TestIssuer::start().await.unwrap();
    let path = auth_support::config_file("card", &issuer, auth_support::RESOURCE, "", CARD_CONFIG);
    let node = tokio::task::spawn_blocking(move || auth_support::node(&path))
        .await
        .unwrap();
    let url = node.url().to_owned();
    // No token, and yet the card.
    let (status, _, body) = get(&format!("{url}/server-card"), &[]).await;
    assert_eq!(status, 200);
    let card: Value = serde_json::from_slice(&body).unwrap();
    let metadata = card["_meta"]["dev.mcp-cluster/node"]["authorization"]["resourceMetadata"]
        .as_str()
        .unwrap_or_else(|| panic!("{card}"));
    assert!(
        metadata.ends_with("/.well-known/oauth-protected-resource/mcp"),
        "{metadata}"
    );
    let authorization = &card["remotes"][0]["headers"][0];
    assert_eq!(authorization["name"], "Authorization");
    assert_eq!(authorization["isRequired"], true);
    assert_eq!(authorization["isSecret"], true);
    // The endpoint itself still wants a token.
    let refused = auth_support::post(&url, None, None, &auth_support::initialize_body()).await;
    assert_eq!(refused.status, 401);
}

#[test]
fn a_card_setting_that_breaks_a_rule_stops_the_start() {
    for (text, says) in [
        (
            "[server_card]\nname = \"weather\"\ndescription = \"d\"\n",
            "server_card.name must be reverse-DNS",
        ),
        (
            &format!(
                "[server_card]\nname = \"com.example/w\"\ndescription = \"{}\"\n",
                "x".repeat(101)
            ),
            "server_card.description must be 1 to 100 characters",
        ),
        (
            "[server_card]\nname = \"com.example/w\"\ndescription = \"d\"\npublic_url = \"mcp.example.com\"\n",
            "server_card.public_url must be an http or https URL",
        ),
    ] {
        let path = config("bad", text);
        let output = std::process::Command::new(node_binary())
            .args(["--bind", "127.0.0.1:0", "--config", path.to_str().unwrap()])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains(says), "{says:?} missing from {stderr}");
    }
}
