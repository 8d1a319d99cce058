//! The Skills extension (`io.modelcontextprotocol/skills`) as operators
//! run it: `mcp-node --skills-dir tests/skills`, two nodes on one Redis.
//! Both eras declare it and list the same skills; every file of every
//! manifest reads back with the digest and size the manifest gives (a
//! binary one as a blob); folder listings page with cursors any node
//! continues; unknown skills and non-folders are refused with -32602; a
//! skills folder that breaks a rule stops the start with exit 64.

mod cluster_support;
mod stateless_support;

use std::path::{Path, PathBuf};

use base64::Engine;
use mcp_cluster_client::Client;
use mcp_cluster_testkit::{Cluster, node_binary, within};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const EXTENSION: &str = "io.modelcontextprotocol/skills";

fn skills_dir() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("skills")
        .to_string_lossy()
        .into_owned()
}

fn two_nodes(extra: &[&str]) -> Cluster {
    let dir = skills_dir();
    let mut args = vec!["--skills-dir", dir.as_str()];
    args.extend_from_slice(extra);
    cluster_support::start(2, &args)
}

/// The result of a session-era request, which must not fail.
async fn ok(client: &Client, method: &str, params: Value) -> Value {
    let (response, _) = within(method, client.request(method, params))
        .await
        .unwrap();
    assert!(response["result"].is_object(), "{method}: {response}");
    response["result"].clone()
}

/// The response of a 2026-07-28 request to `url`.
async fn stateless(url: &str, id: u64, method: &str, params: Value) -> Value {
    let body = stateless_support::request(id, method, params, json!({}));
    stateless_support::call(url, &body, &[]).await.response
}

/// The bytes a `resources/read` result holds.
fn bytes_of(result: &Value) -> Vec<u8> {
    let contents = &result["contents"][0];
    match contents["text"].as_str() {
        Some(text) => text.as_bytes().to_vec(),
        None => base64::engine::general_purpose::STANDARD
            .decode(contents["blob"].as_str().expect("text or blob"))
            .unwrap(),
    }
}

#[tokio::test]
async fn both_eras_serve_the_skills_of_the_folder_through_any_node() {
    let cluster = two_nodes(&[]);
    let (here, there) = (cluster.node_url(0), cluster.node_url(1));
    let a = cluster_support::session(&here, json!({})).await;
    let id = a.session_id().unwrap().to_owned();
    let b = cluster_support::client(&there, &id);

    // Declared in both eras, with folder reads.
    let (_, initialized) = cluster_support::initialize_only(&here, json!({})).await;
    assert_eq!(
        initialized["capabilities"]["extensions"][EXTENSION],
        json!({"directoryRead": true}),
        "{initialized}"
    );
    let discovered = stateless(&there, 1, "server/discover", json!({})).await;
    let extensions = &discovered["result"]["capabilities"]["extensions"];
    assert_eq!(
        extensions[EXTENSION],
        json!({"directoryRead": true}),
        "{discovered}"
    );

    // The same listing in both eras, on either node; the stateless one
    // carries its caching hints, the session one none.
    let listed = ok(&a, "skills/list", json!({})).await;
    let skills = listed["skills"].as_array().unwrap().clone();
    let uris: Vec<&str> = skills.iter().map(|s| s["uri"].as_str().unwrap()).collect();
    assert_eq!(
        uris,
        [
            "skill://acme/billing/refunds/SKILL.md",
            "skill://pdf-processing/SKILL.md"
        ]
    );
    assert!(listed.get("ttlMs").is_none(), "{listed}");
    let modern = stateless(&there, 2, "skills/list", json!({})).await;
    assert_eq!(modern["result"]["skills"], json!(skills), "{modern}");
    assert_eq!(modern["result"]["resultType"], "complete", "{modern}");
    assert!(modern["result"]["ttlMs"].is_u64(), "{modern}");
    assert!(modern["result"]["cacheScope"].is_string(), "{modern}");
    assert_eq!(
        skills[0]["frontmatter"],
        json!({"name": "refunds", "license": "Apache-2.0",
               "description": "Process customer refund requests per company policy",
               "metadata": {"version": "1.2", "owner": "billing"}})
    );

    // Every file of every manifest, read on the other node, has the
    // digest and size its manifest says, the PNG as a blob.
    let mut files = 0;
    for skill in &skills {
        let got = ok(&b, "skills/get", json!({"uri": skill["uri"]})).await;
        assert_eq!(&got["skill"], skill);
        assert!(got.get("nextCursor").is_none(), "{got}");
        for file in skill["resources"].as_array().unwrap() {
            let read = ok(&b, "resources/read", json!({"uri": file["uri"]})).await;
            let bytes = bytes_of(&read);
            assert_eq!(file["size"], bytes.len(), "{file}");
            assert_eq!(
                file["digest"],
                format!("sha256:{:x}", Sha256::digest(&bytes)),
                "{file}"
            );
            files += 1;
        }
    }
    assert_eq!(files, 7);
    let logo = ok(
        &a,
        "resources/read",
        json!({"uri": "skill://pdf-processing/templates/logo.png"}),
    )
    .await;
    assert_eq!(logo["contents"][0]["mimeType"], "image/png", "{logo}");
    assert!(logo["contents"][0]["blob"].is_string(), "{logo}");

    // Each SKILL.md is a listed resource, named and described by its
    // frontmatter.
    let resources = ok(&a, "resources/list", json!({})).await;
    let refunds = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == "skill://acme/billing/refunds/SKILL.md")
        .unwrap_or_else(|| panic!("{resources}"));
    assert_eq!(refunds["name"], "refunds");
    assert_eq!(refunds["mimeType"], "text/markdown");

    // Unknown skills and folders that are files are refused, -32602.
    for (method, uri) in [
        ("skills/get", "skill://nothing/SKILL.md"),
        ("skills/get", "skill://pdf-processing/templates/invoice.md"),
        (
            "resources/directory/read",
            "skill://pdf-processing/SKILL.md",
        ),
        ("resources/directory/read", "skill://nothing"),
    ] {
        let (response, _) = within(method, a.request(method, json!({"uri": uri})))
            .await
            .unwrap();
        assert_eq!(
            response["error"]["code"], -32602,
            "{method} {uri}: {response}"
        );
        let modern = stateless(&there, 3, method, json!({"uri": uri})).await;
        assert_eq!(modern["error"]["code"], -32602, "{method} {uri}: {modern}");
    }
}

#[tokio::test]
async fn folder_listings_page_and_any_node_continues_a_listing() {
    let cluster = two_nodes(&["--page-size", "2"]);
    let nodes = [cluster.node_url(0), cluster.node_url(1)];
    // skill://pdf-processing holds SKILL.md, references, templates; its
    // templates invoice.md, logo.png, regional.
    for (folder, expected) in [
        (
            "skill://pdf-processing",
            vec![
                ("SKILL.md", "text/markdown"),
                ("references", "inode/directory"),
                ("templates", "inode/directory"),
            ],
        ),
        (
            "skill://pdf-processing/templates",
            vec![
                ("invoice.md", "text/markdown"),
                ("logo.png", "image/png"),
                ("regional", "inode/directory"),
            ],
        ),
    ] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0.. {
            let mut params = json!({"uri": folder});
            if let Some(c) = &cursor {
                params["cursor"] = json!(c);
            }
            let answer = stateless(
                &nodes[page % 2],
                10 + page as u64,
                "resources/directory/read",
                params,
            )
            .await;
            let result = &answer["result"];
            for child in result["resources"].as_array().expect("resources") {
                assert_eq!(
                    child["uri"],
                    format!("{folder}/{}", child["name"].as_str().unwrap())
                );
                seen.push((
                    child["name"].as_str().unwrap().to_owned(),
                    child["mimeType"].as_str().unwrap().to_owned(),
                ));
            }
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
            assert!(page < 3, "{answer}");
        }
        let expected: Vec<(String, String)> = expected
            .into_iter()
            .map(|(n, m)| (n.to_owned(), m.to_owned()))
            .collect();
        assert_eq!(seen, expected, "{folder}");
    }
    // skills/list pages too: two skills, a page of two, then none left.
    let listed = stateless(&nodes[0], 20, "skills/list", json!({})).await;
    assert_eq!(listed["result"]["skills"].as_array().unwrap().len(), 2);
    assert!(listed["result"].get("nextCursor").is_none(), "{listed}");
}

/// A copy of `tests/skills` in a fresh folder, for breaking.
fn copy_of_skills(name: &str) -> PathBuf {
    let to = std::env::temp_dir().join(format!("skills-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&to);
    let from = PathBuf::from(skills_dir());
    for entry in walkdir::WalkDir::new(&from) {
        let entry = entry.unwrap();
        let target = to.join(entry.path().strip_prefix(&from).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
    to
}

#[test]
fn a_skills_folder_that_breaks_a_rule_stops_the_start() {
    let run = |dir: &Path| {
        std::process::Command::new(node_binary())
            .args(["--bind", "127.0.0.1:0", "--skills-dir"])
            .arg(dir)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let wrong_name = copy_of_skills("wrong-name");
    std::fs::write(
        wrong_name.join("pdf-processing/SKILL.md"),
        "---\nname: pdf\ndescription: d\n---\n",
    )
    .unwrap();
    let missing = std::env::temp_dir().join("skills-that-are-not-there");
    for (dir, says) in [
        (
            &wrong_name,
            "skill pdf-processing: the frontmatter's name must be \"pdf-processing\"",
        ),
        (&missing, "skills-that-are-not-there"),
    ] {
        let output = run(dir);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{stderr}");
        // The last line, after the log's.
        let line = stderr.trim_end().lines().last().unwrap_or_default();
        assert!(line.starts_with("mcp-node: "), "{stderr}");
        assert!(line.contains(says), "{says:?} missing from {line}");
    }
    std::fs::remove_dir_all(&wrong_name).unwrap();
}
