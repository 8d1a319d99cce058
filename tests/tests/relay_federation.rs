//! Several hosted servers behind one endpoint (a federation of
//! `[[upstreams]]`): `mcp-node` started the way the README says, with a
//! configuration file naming three upstreams, two of them `mcp-node
//! --stdio` (the same tools, prompts and resources each: only their
//! prefixes keep them apart; pages of two) and one that cannot start.

mod relay_support;
mod stateless_support;

use std::collections::BTreeSet;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use relay_support::{Scratch, call, config_file};
use serde_json::{Value, json};

const VERSION: &str = "2025-11-25";

/// One `[[upstreams]]` table running `mcp-node --stdio` with pages of two.
fn inner(name: &str, settings: &str) -> String {
    let argv =
        serde_json::to_string(&[node_binary().display().to_string(), "--stdio".into()]).unwrap();
    format!(
        "[[upstreams]]\nname = \"{name}\"\ncommand = {argv}\n{settings}\n[upstreams.env]\nMCP__PAGE_SIZE = \"2\"\n\n"
    )
}

/// alpha and beta, both `mcp-node --stdio`, and broken, which exits at
/// once.
fn federation() -> (NodeProcess, Scratch) {
    let config = format!(
        "{}{}[[upstreams]]\nname = \"broken\"\ncommand = [\"false\"]\n",
        inner("alpha", ""),
        inner("beta", "")
    );
    let (path, scratch) = config_file("mcp-federation", &config);
    let node = NodeProcess::spawn_logged(&node_binary(), &["--config", &path], &[]).unwrap();
    (node, scratch)
}

async fn session(node: &NodeProcess) -> Client {
    let mut client = Client::new(node.url(), VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    client
}

async fn rpc(client: &Client, method: &str, params: Value) -> Value {
    let (response, _) = within(method, client.request(method, params))
        .await
        .unwrap();
    response
}

/// Every page of `method`, in order: the entries' `key`s, and the largest
/// page.
async fn walk(client: &Client, method: &str, items: &str, key: &str) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    let mut largest = 0;
    let mut cursor: Option<String> = None;
    for _ in 0..200 {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let page = rpc(client, method, params).await;
        let listed = page["result"][items]
            .as_array()
            .unwrap_or_else(|| panic!("{page}"));
        largest = largest.max(listed.len());
        names.extend(listed.iter().map(|i| i[key].as_str().unwrap().to_owned()));
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (names, largest),
        }
    }
    panic!("{method} did not end within 200 pages");
}

async fn next(stream: &mut SseStream, method: &str) -> Value {
    loop {
        let message = within("next message", stream.next_message())
            .await
            .unwrap()
            .expect("the GET stream ended");
        if message["method"] == method {
            return message;
        }
    }
}

#[tokio::test]
async fn one_endpoint_serves_every_upstream_under_its_own_names() {
    let (node, _scratch) = federation();
    let mut client = Client::new(node.url(), VERSION);
    let init = within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    assert_eq!(init["serverInfo"]["name"], "alpha+beta+broken", "{init}");
    assert!(init["capabilities"]["tools"].is_object(), "{init}");
    let instructions = init["instructions"].as_str().unwrap_or_default();
    assert!(
        instructions.contains("alpha: Built-in") && instructions.contains("beta: Built-in"),
        "{init}"
    );

    // Every tool of both, each once, page by page (two a page, as the
    // upstreams page them).
    let (tools, largest) = walk(&client, "tools/list", "tools", "name").await;
    let unique: BTreeSet<&String> = tools.iter().collect();
    assert_eq!(unique.len(), tools.len(), "no tool twice: {tools:?}");
    let of = |prefix: &str| {
        tools
            .iter()
            .filter_map(|t| t.strip_prefix(prefix))
            .collect::<BTreeSet<_>>()
    };
    let (alpha, beta) = (of("alpha_"), of("beta_"));
    assert!(alpha.contains("echo") && alpha.len() > 10, "{tools:?}");
    assert_eq!(alpha, beta, "the same server twice, told apart by prefix");
    assert_eq!(alpha.len() + beta.len(), tools.len(), "{tools:?}");
    assert_eq!(largest, 2, "pages as the upstreams made them");

    let (echoed, _) = call(&client, "beta_echo", json!({"message": "hi"})).await;
    assert_eq!(
        echoed["result"]["content"][0]["text"], "Echo: hi",
        "{echoed}"
    );
    let (added, _) = call(&client, "alpha_add", json!({"a": 2, "b": 3})).await;
    assert_eq!(added["result"]["structuredContent"]["sum"], 5.0, "{added}");
    // A resource in a tool's result carries the URI clients read it by.
    let (embedded, _) = call(&client, "alpha_test_embedded_resource", json!({})).await;
    assert_eq!(
        embedded["result"]["content"][0]["resource"]["uri"], "alpha+test://embedded-resource",
        "{embedded}"
    );

    // The upstream that could not start fails its own names only, saying
    // which upstream it is.
    let (failed, _) = call(&client, "broken_echo", json!({"message": "x"})).await;
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("upstream broken"), "{failed}");
    let (unknown, _) = call(&client, "gamma_echo", json!({"message": "x"})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // Resources: each upstream's URIs under a scheme of its own, read back
    // as the client names them.
    let (uris, _) = walk(&client, "resources/list", "resources", "uri").await;
    assert!(
        uris.contains(&"alpha+test://static-text".to_owned()),
        "{uris:?}"
    );
    assert!(
        uris.contains(&"beta+test://static-text".to_owned()),
        "{uris:?}"
    );
    let read = rpc(
        &client,
        "resources/read",
        json!({"uri": "beta+test://static-text"}),
    )
    .await;
    assert_eq!(
        read["result"]["contents"][0]["uri"], "beta+test://static-text",
        "{read}"
    );
    let (templates, _) = walk(
        &client,
        "resources/templates/list",
        "resourceTemplates",
        "uriTemplate",
    )
    .await;
    assert!(
        templates.contains(&"alpha+test://template/{id}/data".to_owned()),
        "{templates:?}"
    );
    let read = rpc(
        &client,
        "resources/read",
        json!({"uri": "alpha+test://template/7/data"}),
    )
    .await;
    assert!(read["result"]["contents"][0]["text"].is_string(), "{read}");
    let completed = rpc(
        &client,
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "alpha+test://template/{id}/data"},
               "argument": {"name": "id", "value": "3"}}),
    )
    .await;
    assert_eq!(
        completed["result"]["completion"]["values"],
        json!(["3"]),
        "{completed}"
    );

    // Prompts.
    let (prompts, _) = walk(&client, "prompts/list", "prompts", "name").await;
    assert!(
        prompts.contains(&"beta_test_simple_prompt".to_owned()),
        "{prompts:?}"
    );
    let got = rpc(
        &client,
        "prompts/get",
        json!({"name": "beta_test_simple_prompt"}),
    )
    .await;
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"], "This is a simple prompt for testing.",
        "{got}"
    );

    // A cursor the federation did not make is refused, not guessed at.
    let bad = rpc(&client, "tools/list", json!({"cursor": "not-ours"})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

#[tokio::test]
async fn what_an_upstream_announces_reaches_the_client_under_its_names() {
    let (node, _scratch) = federation();
    let client = session(&node).await;
    let Reply::Sse(mut get) = within("GET", client.get(None)).await.unwrap() else {
        panic!("the GET stream is a stream");
    };
    let subscribed = rpc(
        &client,
        "resources/subscribe",
        json!({"uri": "alpha+test://watched-resource"}),
    )
    .await;
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    // The upstream's own tool takes the upstream's own URI.
    let (touched, _) = call(
        &client,
        "alpha_touch_resource",
        json!({"uri": "test://watched-resource"}),
    )
    .await;
    assert!(touched["result"].is_object(), "{touched}");
    let update = next(&mut get, "notifications/resources/updated").await;
    assert_eq!(update["params"]["uri"], "alpha+test://watched-resource");

    let (triggered, _) = call(&client, "beta_test_trigger_tool_change", json!({})).await;
    assert!(triggered["result"].is_object(), "{triggered}");
    next(&mut get, "notifications/tools/list_changed").await;
}

#[tokio::test]
async fn the_2026_07_28_era_walks_the_same_merged_lists() {
    let (node, _scratch) = federation();
    let url = node.url();
    let post = |id: u64, method: &'static str, params: Value| async move {
        stateless_support::call(
            url,
            &stateless_support::request(id, method, params, json!({})),
            &[],
        )
        .await
        .response
    };
    let discovered = post(1, "server/discover", json!({})).await;
    let info = &discovered["result"]["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info["name"], "alpha+beta+broken", "{discovered}");
    // Upstreams spoken to in the session era: every revision the node
    // speaks, through it.
    let versions = discovered["result"]["supportedVersions"]
        .as_array()
        .unwrap();
    assert!(
        versions.contains(&json!("2026-07-28")) && versions.contains(&json!("2025-11-25")),
        "{discovered}"
    );
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for id in 2..100 {
        let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
        let page = post(id, "tools/list", params).await;
        let listed = page["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{page}"));
        names.extend(
            listed
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned()),
        );
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert!(names.contains(&"alpha_echo".to_owned()), "{names:?}");
    assert!(names.contains(&"beta_echo".to_owned()), "{names:?}");
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    let called = post(
        200,
        "tools/call",
        json!({"name": "beta_echo", "arguments": {"message": "stateless"}}),
    )
    .await;
    assert_eq!(
        called["result"]["content"][0]["text"], "Echo: stateless",
        "{called}"
    );
}

/// The node's exit code and stderr when it refuses `config` at start.
async fn refused(prefix: &str, config: &str) -> (Option<i32>, String) {
    let (path, _scratch) = config_file(prefix, config);
    let output = within(
        "the node's refusal",
        tokio::process::Command::new(node_binary())
            .args(["--config", &path])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn upstreams_that_would_serve_one_name_are_refused_at_start_naming_both() {
    let config = format!(
        "{}{}",
        inner("alpha", "prefix = false"),
        inner("beta", "prefix = false")
    );
    let (code, stderr) = refused("mcp-federation-clash", &config).await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(
        stderr.contains("upstream \"alpha\"") && stderr.contains("upstream \"beta\""),
        "{stderr}"
    );

    // Overlapping prefixes are refused before anything starts.
    let config = format!("{}{}", inner("a", ""), inner("a_b", ""));
    let (code, stderr) = refused("mcp-federation-prefixes", &config).await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("prefixes that overlap"), "{stderr}");
}
