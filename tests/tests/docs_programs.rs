//! Every Rust program the docs show is a file the test command compiles,
//! and the README's provider program runs.
//!
//! A fenced Rust block (` ```rust `, ` ```rs `, with or without attributes)
//! in any Markdown file of the repository must follow a marker line naming
//! an example or a binary of a workspace crate:
//!
//! ```text
//! <!-- example: examples/src/bin/greeter.rs -->
//! ```
//!
//! and be byte for byte that file. Cargo builds every `examples/*.rs` and
//! `src/bin/*.rs` of a member (`cargo build --workspace --all-targets`, the
//! first step of `tests/run-all.sh`; clippy `--all-targets` lints them), so
//! the text cannot drift from code that compiles. To show a new program:
//! write it as `examples/src/bin/<name>.rs` (the workspace's `examples`
//! crate) or `<crate>/examples/<name>.rs`, paste it verbatim under the
//! marker, and, if it serves, start it as users would (here, or in
//! `tests/tests/examples.rs` as a cluster).

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{GUARD, NodeProcess, program_binary, within};
use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use serde_json::json;

/// The marker line before a Rust block: `<!-- example: PATH -->`.
const MARKER_START: &str = "<!-- example:";
const MARKER_END: &str = "-->";

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}

/// Every Markdown file of the repository, outside build output, installed
/// packages and hidden directories (`.git`, virtualenvs).
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let skipped = |entry: &walkdir::DirEntry| {
        let name = entry.file_name().to_string_lossy();
        entry.depth() > 0
            && entry.file_type().is_dir()
            && (name.starts_with('.') || name == "target" || name == "node_modules")
    };
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_entry(|e| !skipped(e))
        .map(|e| e.expect("readable repository tree"))
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| e.into_path())
        .collect();
    files.sort();
    files
}

/// A fenced Rust block of a Markdown file.
#[derive(Debug)]
struct RustBlock {
    /// 1-based line of its opening fence.
    line: usize,
    /// What the marker line before it names, if there is one.
    marker: Option<String>,
    /// Its text, every line with its newline.
    text: String,
}

fn is_rust(info: &str) -> bool {
    let lang = info
        .split(|c: char| c == ',' || c.is_whitespace())
        .next()
        .unwrap_or_default();
    lang == "rust" || lang == "rs"
}

/// The path the marker on the last non-blank line of `before` names.
fn marker(before: &str) -> Option<String> {
    let line = before.trim_end().lines().next_back()?.trim();
    let path = line.strip_prefix(MARKER_START)?.strip_suffix(MARKER_END)?;
    Some(path.trim().to_owned())
}

fn rust_blocks(markdown: &str) -> Vec<RustBlock> {
    let mut blocks = Vec::new();
    let mut open: Option<RustBlock> = None;
    for (event, range) in Parser::new(markdown).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) if is_rust(&info) => {
                let before = &markdown[..range.start];
                open = Some(RustBlock {
                    line: before.lines().count() + 1,
                    marker: marker(before),
                    text: String::new(),
                });
            }
            Event::Text(text) => {
                if let Some(block) = &mut open {
                    block.text.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(open.take()),
            _ => {}
        }
    }
    blocks
}

/// The workspace members, as directories relative to the root.
fn workspace_members(root: &Path) -> BTreeSet<PathBuf> {
    let manifest: toml::Table = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    manifest["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| PathBuf::from(m.as_str().unwrap()))
        .collect()
}

/// Why `path` (relative to the root) is not a program Cargo builds, if it
/// is not: `<member>/examples/<name>.rs` or `<member>/src/bin/<name>.rs`
/// of a workspace member that keeps Cargo's discovery of them.
fn not_an_example(root: &Path, members: &BTreeSet<PathBuf>, path: &Path) -> Option<String> {
    let plain = path.components().all(|c| matches!(c, Component::Normal(_)));
    let dir = path.parent().unwrap_or(Path::new(""));
    let (member, discovery) = if dir.file_name() == Some("examples".as_ref()) {
        (dir.parent(), "autoexamples")
    } else if dir.ends_with("src/bin") {
        (dir.parent().and_then(Path::parent), "autobins")
    } else {
        (None, "")
    };
    let member = match member {
        Some(member) if plain && path.extension() == Some("rs".as_ref()) => member,
        _ => return Some("must be <crate>/examples/<name>.rs or <crate>/src/bin/<name>.rs".into()),
    };
    if !members.contains(member) {
        return Some(format!("{} is not a workspace member", member.display()));
    }
    let manifest = std::fs::read_to_string(root.join(member).join("Cargo.toml")).unwrap();
    let manifest: toml::Table = manifest.parse().unwrap();
    let discovers = manifest
        .get("package")
        .and_then(|p| p.get(discovery))
        .and_then(toml::Value::as_bool)
        .unwrap_or(true);
    if !discovers {
        return Some(format!("{} sets {discovery} = false", member.display()));
    }
    None
}

#[test]
fn every_rust_block_in_the_docs_is_a_compiled_example_verbatim() {
    let root = repository_root();
    let members = workspace_members(&root);
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for file in markdown_files(&root) {
        let shown = file.strip_prefix(&root).unwrap().display().to_string();
        let markdown = std::fs::read_to_string(&file).unwrap();
        for block in rust_blocks(&markdown) {
            let at = format!("{shown}:{}", block.line);
            let Some(path) = block.marker else {
                failures.push(format!(
                    "{at}: a Rust block without a `{MARKER_START} examples/src/bin/<name>.rs \
                     {MARKER_END}` line (or <crate>/examples/<name>.rs) before it"
                ));
                continue;
            };
            if let Some(why) = not_an_example(&root, &members, Path::new(&path)) {
                failures.push(format!("{at}: {path}: {why}"));
                continue;
            }
            match std::fs::read_to_string(root.join(&path)) {
                Ok(source) if source == block.text => checked.push(format!("{at} = {path}")),
                Ok(source) => {
                    let line = source
                        .lines()
                        .zip(block.text.lines())
                        .position(|(a, b)| a != b)
                        .unwrap_or_else(|| source.lines().count().min(block.text.lines().count()))
                        + 1;
                    failures.push(format!(
                        "{at}: differs from {path} from its line {line} on: copy the file into \
                         the block verbatim"
                    ));
                }
                Err(err) => failures.push(format!("{at}: {path}: {err}")),
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    // The README's provider program at least: an empty walk proves nothing.
    assert!(
        checked
            .iter()
            .any(|c| c.starts_with("README.md:") && c.ends_with("examples/src/bin/greeter.rs")),
        "the README's provider program was not found: {checked:?}"
    );
}

#[test]
fn a_block_without_marker_or_with_other_text_is_found() {
    // The checker itself: a marker is read only from the line right above
    // the fence, whatever the fence's attributes.
    let markdown = "# T\n\n```rust\nfn main() {}\n```\n\n<!-- example: a/examples/b.rs -->\n\
                    ```rust,no_run\nfn main() {}\n```\n\n```sh\nls\n```\n\n<!-- example: c -->\n\
                    text\n\n```rs\nx\n```\n";
    let blocks = rust_blocks(markdown);
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    assert_eq!(blocks[0].marker, None);
    assert_eq!(blocks[0].line, 3);
    assert_eq!(blocks[0].text, "fn main() {}\n");
    assert_eq!(blocks[1].marker.as_deref(), Some("a/examples/b.rs"));
    assert_eq!(
        blocks[2].marker, None,
        "a marker not right above does not count"
    );

    let root = repository_root();
    let members = workspace_members(&root);
    for bad in [
        "crates/mcp-cluster/src/lib.rs",
        "../crates/mcp-cluster/examples/greeter.rs",
        "crates/nowhere/examples/greeter.rs",
        "examples/src/greeter.rs",
        "examples/src/bin/greeter.txt",
        "nowhere/src/bin/greeter.rs",
    ] {
        assert!(
            not_an_example(&root, &members, Path::new(bad)).is_some(),
            "{bad}"
        );
    }
    for good in [
        "crates/mcp-cluster/examples/slow_tools.rs",
        "examples/src/bin/greeter.rs",
    ] {
        assert_eq!(
            not_an_example(&root, &members, Path::new(good)),
            None,
            "{good}"
        );
    }
}

/// The README's "Writing a server" program, started as its reader would
/// (on a free port), serves its tool over Streamable HTTP and drains on
/// SIGTERM. (`tests/tests/examples.rs` runs it as a cluster, called by the
/// TypeScript SDK in both eras.)
#[tokio::test]
async fn the_readme_provider_program_serves_its_tool() {
    let mut program = NodeProcess::spawn_program(
        &program_binary("greeter"),
        &["--bind", "127.0.0.1:0", "--log", "warn"],
    )
    .expect("the greeter example starts and reports its address");
    let url = program.url().to_owned();
    assert!(url.ends_with("/mcp"), "{url}");

    let mut client = Client::new(&url, "2025-11-25");
    let init = within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    assert_eq!(init["serverInfo"]["name"], "greeter", "{init}");
    let (list, _) = within("tools/list", client.request("tools/list", json!({})))
        .await
        .unwrap();
    let tools = list["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{list}");
    assert_eq!(tools[0]["name"], "greet");
    assert_eq!(
        tools[0]["inputSchema"]["required"],
        json!(["name"]),
        "{list}"
    );

    let (called, notifications) = within(
        "tools/call greet",
        client.request(
            "tools/call",
            json!({"name": "greet", "arguments": {"name": "Ann"}, "_meta": {"progressToken": "p"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        called["result"]["content"][0]["text"], "Hello, Ann!",
        "{called}"
    );
    assert_eq!(called["result"]["isError"], false, "{called}");
    // As its comments say: progress for the token, then the log message,
    // on the call's SSE stream.
    let methods: Vec<&str> = notifications
        .iter()
        .filter_map(|n| n["method"].as_str())
        .collect();
    assert_eq!(
        methods,
        ["notifications/progress", "notifications/message"],
        "{notifications:?}"
    );
    assert_eq!(notifications[0]["params"]["progressToken"], "p");
    assert_eq!(notifications[1]["params"]["data"], "greeting");
    assert!(
        called["result"].get("structuredContent").is_none(),
        "{called}"
    );

    // Arguments are checked against the derived schema before the handler.
    let (bad, _) = within(
        "tools/call greet without a name",
        client.request("tools/call", json!({"name": "greet", "arguments": {}})),
    )
    .await
    .unwrap();
    assert_eq!(bad["result"]["isError"], true, "{bad}");

    let status = program
        .terminate_within(GUARD * 3)
        .expect("the program stops on SIGTERM");
    assert!(status.success(), "{status}");
}
