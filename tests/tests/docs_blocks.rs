//! The documentation's command blocks, run as written, so that the text
//! cannot drift from the binary.
//!
//! In `README.md`, `loadtest/README.md` and `proto-docs/*.md`:
//! - a command block (fenced `sh`, `bash`, `shell` or `console`) directly
//!   followed by an output block (a fence without a language), or showing
//!   its output in comments (`# HTTP/1.1 …`, `# {"…`), must carry,
//!   on the line before it, either `<!-- doc-run: GROUP -->` (run and
//!   compared) or `<!-- doc-skip: REASON -->` (not runnable here, and why);
//!   a pair with neither fails [`every_output_block_is_run_or_marked`];
//! - every command block parses (`bash -n`) and sets the `$VARIABLES` it
//!   reads in an earlier block of its page (or they are the environment's);
//! - the blocks of one `doc-run` group run in order in one `bash` (shell
//!   variables carry over from block to block, stderr joins stdout),
//!   with the node under test and `target/debug` first on `PATH`
//!   (`mcp-node`, `mcp-loadtest`), and
//!   a fresh node standing in for `127.0.0.1:8080`, and what each prints
//!   must match its output block.
//!
//! Matching, line by line: `[..]` or `…` matches any text in a line, a line
//! `...` any lines; HTTP header blocks compare in any order; HTTP dates, log
//! timestamps and the time part of event ids match any such value; a UUID
//! or 32-hex id in the page stands for the real one it meets first, the
//! same every time after, and is replaced by it in the group's later
//! commands (so `SID=<the id shown above>` runs as written).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::LazyLock;

use mcp_cluster_testkit::{NodeProcess, node_binary};
use regex::Regex;

/// The pages whose blocks are checked.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md"), root.join("loadtest/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("proto-docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

const COMMAND_LANGS: &[&str] = &["sh", "bash", "shell", "console"];

/// The address the pages' commands use for a node.
const DOC_ADDR: &str = "127.0.0.1:8080";

#[derive(Debug, Clone, PartialEq)]
enum Marker {
    Run(String),
    Skip(String),
}

#[derive(Debug, Clone)]
struct Block {
    page: PathBuf,
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    body: String,
    marker: Option<Marker>,
    /// Only blank lines between the previous block's closing fence and
    /// this one's opening fence.
    follows_previous: bool,
}

impl Block {
    fn at(&self) -> String {
        let page = self.page.strip_prefix(root()).unwrap_or(&self.page);
        format!("{}:{}", page.display(), self.line)
    }

    fn is_command(&self) -> bool {
        COMMAND_LANGS.contains(&self.lang.as_str())
    }
}

fn blocks(page: &Path) -> Vec<Block> {
    let text = std::fs::read_to_string(page).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut last_close: Option<usize> = None;
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let Some(lang) = trimmed.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let open = i;
        let lang = lang.trim().to_owned();
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            body.push(lines[i]);
            i += 1;
        }
        let marker = lines[..open]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| marker(l));
        let follows_previous = last_close
            .is_some_and(|close| lines[close + 1..open].iter().all(|l| l.trim().is_empty()));
        blocks.push(Block {
            page: page.to_owned(),
            line: open + 1,
            lang,
            body: body.join("\n"),
            marker,
            follows_previous,
        });
        last_close = Some(i);
        i += 1;
    }
    blocks
}

fn marker(line: &str) -> Option<Marker> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    if let Some(group) = inner.strip_prefix("doc-run:") {
        return Some(Marker::Run(group.trim().to_owned()));
    }
    inner
        .strip_prefix("doc-skip:")
        .map(|reason| Marker::Skip(reason.trim().to_owned()))
}

/// (command block, its output block) pairs of a page.
fn pairs(blocks: &[Block]) -> Vec<(Block, Block)> {
    blocks
        .windows(2)
        .filter(|w| w[0].is_command() && w[1].lang.is_empty() && w[1].follows_previous)
        .map(|w| (w[0].clone(), w[1].clone()))
        .collect()
}

/// A command block that shows its output in comments (`# HTTP/1.1 401 …`,
/// `# {"jsonrpc": …}`).
fn shows_output_in_comments(block: &Block) -> bool {
    block.is_command()
        && block.body.lines().any(|l| {
            let l = l.trim_start();
            l.starts_with("# HTTP/") || l.starts_with("# {\"")
        })
}

#[test]
fn every_output_block_is_run_or_marked() {
    let mut unmarked = Vec::new();
    let mut runs = 0;
    for page in pages() {
        let blocks = blocks(&page);
        let commented = blocks.iter().filter(|b| shows_output_in_comments(b));
        for command in pairs(&blocks)
            .into_iter()
            .map(|(command, _)| command)
            .chain(commented.cloned())
        {
            match &command.marker {
                Some(Marker::Run(group)) if !group.is_empty() => runs += 1,
                Some(Marker::Skip(reason)) if reason.len() >= 10 => {}
                _ => unmarked.push(command.at()),
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "command blocks showing output without `<!-- doc-run: GROUP -->` or \
         `<!-- doc-skip: REASON -->` on the line before: {unmarked:#?}"
    );
    assert!(runs >= 5, "only {runs} blocks run");
}

/// Variables a command block may read without setting them.
const ENVIRONMENT: &[&str] = &["HOME", "PATH", "PWD", "USER", "TMPDIR"];

#[test]
fn command_blocks_parse_and_set_the_variables_they_read() {
    static READ: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)").unwrap());
    static SET: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?m)(?:^|[\s;(]|export )([A-Za-z_][A-Za-z0-9_]*)\+?=|for ([A-Za-z_][A-Za-z0-9_]*) in",
        )
        .unwrap()
    });
    let mut problems = Vec::new();
    for page in pages() {
        let mut set: Vec<String> = ENVIRONMENT.iter().map(|&v| v.to_owned()).collect();
        for block in blocks(&page).iter().filter(|b| b.is_command()) {
            let output = Command::new("bash")
                .args(["-n", "-c", &block.body])
                .output()
                .unwrap();
            if !output.status.success() {
                problems.push(format!(
                    "{}: bash -n: {}",
                    block.at(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            // Comments may show a variable as text.
            let code: String = block
                .body
                .lines()
                .map(|l| {
                    if l.trim_start().starts_with('#') {
                        ""
                    } else {
                        l
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            for captures in SET.captures_iter(&code) {
                let name = captures.get(1).or_else(|| captures.get(2)).unwrap();
                set.push(name.as_str().to_owned());
            }
            for captures in READ.captures_iter(&code) {
                let name = &captures[1];
                // `$?`, `$!`, `$1` do not match; awk's `$1` neither.
                if !set.iter().any(|s| s == name) {
                    problems.push(format!(
                        "{}: reads ${name}, set by no earlier block",
                        block.at()
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// One `bash` for a group, fed block by block.
struct Shell {
    child: Child,
    out: BufReader<ChildStdout>,
}

const END: &str = "@@doc-block-end@@";

impl Shell {
    fn start() -> Self {
        // The node under test first (`MCP_NODE_BIN` may name a release
        // build), then the workspace's debug builds.
        let node_dir = node_binary()
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let path = format!(
            "{}:{}:{}",
            node_dir.display(),
            root().join("target/debug").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let dir = std::env::temp_dir().join(format!("mcp-docs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new("bash")
            .env("PATH", path)
            .current_dir(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut shell = Self { child, out };
        shell.run("exec 2>&1");
        shell
    }

    /// Runs `text`; what it printed.
    fn run(&mut self, text: &str) -> String {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{text}").unwrap();
        writeln!(stdin, "printf '\\n{END}\\n'").unwrap();
        stdin.flush().unwrap();
        self.read()
    }

    fn read(&mut self) -> String {
        let mut all = String::new();
        loop {
            let mut line = String::new();
            let n = self.out.read_line(&mut line).unwrap();
            assert!(n > 0, "bash ended: {all}");
            if line.trim_end() == END {
                return all;
            }
            all.push_str(&line);
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap()
});

/// Tokens of an expected line: wildcards, ids, volatile values.
static TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?P<any>\[\.\.\]|…)",
        r"|(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})",
        r"|(?P<hex>[0-9a-f]{32})(?P<event>\.[0-9]+-[0-9]+)?",
        r"|(?P<date>[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9:]{8} GMT)",
        r"|(?P<stamp>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]+Z)",
    ))
    .unwrap()
});

/// The ids of the page and the real ones they stand for.
#[derive(Debug, Default)]
struct Ids(HashMap<String, String>);

impl Ids {
    /// Whether `actual` matches `expected` (one line); learns the ids.
    fn line_matches(&mut self, expected: &str, actual: &str) -> bool {
        let mut pattern = String::from("^");
        let mut ids = Vec::new();
        let mut last = 0;
        for captures in TOKEN.captures_iter(expected) {
            let whole = captures.get(0).unwrap();
            pattern.push_str(&regex::escape(&expected[last..whole.start()]));
            last = whole.end();
            if captures.name("any").is_some() {
                pattern.push_str(".*?");
            } else if captures.name("stamp").is_some() {
                pattern.push_str(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]+Z");
            } else if captures.name("date").is_some() {
                pattern.push_str("[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9:]{8} GMT");
            } else {
                let (id, shape) = match (captures.name("uuid"), captures.name("hex")) {
                    (Some(uuid), _) => (uuid.as_str(), UUID.as_str().to_owned()),
                    (None, Some(hex)) => (hex.as_str(), "[0-9a-f]{32}".to_owned()),
                    (None, None) => unreachable!("one alternative matched"),
                };
                match self.0.get(id) {
                    Some(real) => pattern.push_str(&regex::escape(real)),
                    None => {
                        pattern.push_str(&format!("({shape})"));
                        ids.push(id.to_owned());
                    }
                }
                if let Some(event) = captures.name("event") {
                    // The priming event's `.0-0` is exact; the others'
                    // times are the clock's.
                    if event.as_str() == ".0-0" {
                        pattern.push_str(r"\.0-0");
                    } else {
                        pattern.push_str(r"\.[0-9]+-[0-9]+");
                    }
                }
            }
        }
        pattern.push_str(&regex::escape(&expected[last..]));
        pattern.push('$');
        let Some(found) = Regex::new(&pattern).unwrap().captures(actual) else {
            return false;
        };
        for (i, id) in ids.into_iter().enumerate() {
            let real = found.get(i + 1).unwrap().as_str().to_owned();
            self.0.entry(id).or_insert(real);
        }
        true
    }

    /// Whether `actual` matches `expected`, line by line (`...` for any
    /// lines).
    fn matches(&mut self, expected: &[String], actual: &[String]) -> bool {
        let (mut e, mut a) = (0, 0);
        while e < expected.len() {
            if expected[e] == "..." {
                let Some(next) = expected.get(e + 1) else {
                    return true;
                };
                match (a..actual.len()).find(|&i| self.line_matches(next, &actual[i])) {
                    Some(i) => {
                        a = i + 1;
                        e += 2;
                    }
                    None => return false,
                }
                continue;
            }
            if a >= actual.len() || !self.line_matches(&expected[e], &actual[a]) {
                return false;
            }
            e += 1;
            a += 1;
        }
        a == actual.len()
    }

    /// `text` with the page's ids replaced by the real ones.
    fn substitute(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |text, (doc, real)| text.replace(doc, real))
    }
}

/// Lines without `\r` and trailing blanks, blank lines at both ends
/// dropped, each HTTP header block sorted by header name.
fn normalize(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| l.trim_end_matches('\r').trim_end().to_owned())
        .collect();
    while lines.first().is_some_and(String::is_empty) {
        lines.remove(0);
    }
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with("HTTP/1.1 ") {
            let start = i + 1;
            let end = (start..lines.len())
                .find(|&j| lines[j].is_empty())
                .unwrap_or(lines.len());
            lines[start..end].sort_by_key(|l| l.split(':').next().unwrap_or("").to_lowercase());
            i = end;
        }
        i += 1;
    }
    lines
}

/// Runs the blocks of `group` in `page`; the mismatches.
fn run_group(page: &str, group: &str) -> Vec<String> {
    let page = root().join(page);
    let pairs: Vec<(Block, Block)> = pairs(&blocks(&page))
        .into_iter()
        .filter(|(command, _)| command.marker == Some(Marker::Run(group.to_owned())))
        .collect();
    assert!(
        !pairs.is_empty(),
        "no block of group {group} in {}",
        page.display()
    );
    let mut node: Option<NodeProcess> = None;
    let mut shell = Shell::start();
    let mut ids = Ids::default();
    let mut failures = Vec::new();
    for (command, output) in pairs {
        let mut text = ids.substitute(&command.body);
        if text.contains(DOC_ADDR) {
            let node = node.get_or_insert_with(|| {
                NodeProcess::spawn(&node_binary(), &["--log", "error"])
                    .unwrap_or_else(|err| panic!("node: {err:#}"))
            });
            let addr = node
                .url()
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap();
            text = text.replace(DOC_ADDR, addr);
        }
        let actual = normalize(&shell.run(&text));
        let expected = normalize(&output.body);
        if !ids.matches(&expected, &actual) {
            failures.push(format!(
                "{}: the output differs from the page's.\n--- page ({})\n{}\n--- actual\n{}\n",
                command.at(),
                output.at(),
                expected.join("\n"),
                actual.join("\n")
            ));
        }
    }
    failures
}

#[track_caller]
fn assert_group(page: &str, group: &str) {
    let failures = run_group(page, group);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// README, "Flags and environment variables": bad configuration, exit 64.
#[test]
fn readme_exit_codes() {
    assert_group("README.md", "exit-codes");
}

/// README, "A session with curl", against a fresh node.
///
/// Its echo and long_running_operation results carry no
/// `"structuredContent":{}` (text-only tools): this passes once text-only
/// results stop sending the empty object (issue 15, item 3).
#[test]
fn readme_curl_session() {
    assert_group("README.md", "curl-session");
}

/// README, "Protocol versions": the 2026-07-28 exchange, an
/// input-required round and its retry.
#[test]
fn readme_stateless_round_trip() {
    assert_group("README.md", "stateless");
}

#[test]
fn the_matcher_learns_ids_and_refuses_other_text() {
    let mut ids = Ids::default();
    let doc = "mcp-session-id: 69566ebf-3e23-4bcf-9ac9-3652b0fb5ce5";
    assert!(ids.line_matches(doc, "mcp-session-id: c0d0728d-62c7-4e90-808b-f06775c7d096"));
    // The same page id now stands for that real one only.
    assert!(!ids.line_matches(doc, "mcp-session-id: 00000000-62c7-4e90-808b-f06775c7d096"));
    assert_eq!(
        ids.substitute("SID=69566ebf-3e23-4bcf-9ac9-3652b0fb5ce5"),
        "SID=c0d0728d-62c7-4e90-808b-f06775c7d096"
    );
    assert!(ids.line_matches("{\"a\":1,…}", "{\"a\":1,\"b\":2}"));
    assert!(!ids.line_matches("{\"a\":1}", "{\"a\":2}"));
    assert!(ids.line_matches(
        "id: adcccd633e9241f0b7b2cd72550cc911.1795231145516-0",
        "id: 38c8eb36821c4e17bd262e651e40eb45.1795723977538-3"
    ));
    assert!(!ids.line_matches(
        "id: adcccd633e9241f0b7b2cd72550cc911.0-0",
        "id: 38c8eb36821c4e17bd262e651e40eb45.17-0"
    ));
    let lines = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(ids.matches(&lines("a\n...\nz"), &lines("a\nb\nc\nz")));
    assert!(!ids.matches(&lines("a\nz"), &lines("a\nb\nz")));
    assert_eq!(
        normalize("HTTP/1.1 200 OK\r\nb: 2\r\na: 1\r\n\r\nbody\n"),
        lines("HTTP/1.1 200 OK\na: 1\nb: 2\n\nbody")
    );
}
