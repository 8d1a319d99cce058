//! The runtime's folders are layers: each may use the ones below it and
//! never one above, and the two eras (session, stateless) never use each
//! other. The order is the one the crate documents (the `# Layers` list in
//! `src/lib.rs`); this test reads the sources and fails on any `crate::`
//! path that goes up or sideways, so an import circle between the folders
//! cannot come back.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layers as `src/lib.rs` lists them, lowest first: each line
/// `//! N. [`a`], [`b`]: …` of its `# Layers` section is one layer.
fn documented_layers() -> Vec<BTreeSet<String>> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut layers = Vec::new();
    let mut inside = false;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim();
        if doc.starts_with('#') {
            inside = doc == "# Layers";
            continue;
        }
        if !inside {
            continue;
        }
        let Some((number, rest)) = doc.split_once(". ") else {
            continue;
        };
        if number.parse::<usize>().is_err() {
            continue;
        }
        let head = rest.split(':').next().unwrap_or("");
        let folders: BTreeSet<String> = head
            .split(',')
            .map(|f| f.trim().trim_matches(|c| c == '[' || c == ']' || c == '`'))
            .filter(|f| !f.is_empty())
            .map(str::to_owned)
            .collect();
        layers.push(folders);
    }
    assert!(
        layers.len() >= 3,
        "src/lib.rs documents no `# Layers` list: {layers:?}"
    );
    layers
}

/// The source with comments (and so doc links) removed: only code counts.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every `crate::` path in `code`, groups included
/// (`crate::{a::X, b}` names `a` and `b`).
fn crate_roots(code: &str) -> Vec<String> {
    let mut roots = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `pub(crate)` and the like are no paths.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        roots.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            if !item.trim().is_empty() {
                roots.push(first_segment(&item));
            }
        } else {
            roots.push(first_segment(rest));
        }
    }
    roots
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn folders_use_only_the_layers_below_them() {
    let layers = documented_layers();
    let layer_of: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(n, folders)| folders.iter().map(move |f| (f.as_str(), n)))
        .collect();

    // Every folder is in the list, and nothing but lib.rs sits beside them.
    let mut on_disk = BTreeSet::new();
    for entry in std::fs::read_dir(src()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            on_disk.insert(name);
        } else {
            assert_eq!(name, "lib.rs", "a file beside the layers: src/{name}");
        }
    }
    let documented: BTreeSet<String> = layer_of.keys().map(|f| (*f).to_owned()).collect();
    assert_eq!(
        on_disk, documented,
        "folders on disk and in src/lib.rs differ"
    );

    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for folder in &on_disk {
        let mut files = Vec::new();
        rust_files(&src().join(folder), &mut files);
        files.sort();
        for file in files {
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            let shown = file.strip_prefix(src()).unwrap().display().to_string();
            for root in crate_roots(&code) {
                if root == *folder {
                    continue;
                }
                let Some(&to) = layer_of.get(root.as_str()) else {
                    // A root re-export (`crate::Runtime`) or an alias would
                    // hide which folder is used.
                    wrong.push(format!("{shown}: crate::{root} names no folder"));
                    continue;
                };
                graph
                    .entry(folder.clone())
                    .or_default()
                    .insert(root.clone());
                let from = layer_of[folder.as_str()];
                if to >= from {
                    wrong.push(format!(
                        "{shown}: {folder} (layer {from}) uses {root} (layer {to})"
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "uses against the layers of src/lib.rs:\n{}",
        wrong.join("\n")
    );

    // The same, as a graph: no circle between folders.
    let mut done = BTreeSet::new();
    while done.len() < on_disk.len() {
        let next = on_disk
            .iter()
            .find(|f| {
                !done.contains(*f)
                    && graph
                        .get(*f)
                        .is_none_or(|uses| uses.iter().all(|u| done.contains(u)))
            })
            .cloned();
        let Some(next) = next else {
            panic!("import circle between folders: {graph:?}");
        };
        done.insert(next);
    }

    // The two eras share the layer below them and nothing else.
    for (a, b) in [("session", "stateless"), ("stateless", "session")] {
        assert!(
            !graph.get(a).is_some_and(|uses| uses.contains(b)),
            "{a} uses {b}"
        );
    }
}

#[test]
fn paths_are_read_through_groups_and_comments() {
    let code = code_of(
        "use crate::{node::config::X, request::{a, b}};\n\
         pub(crate) fn f() {} // crate::runtime\n\
         let y = crate::session::Y;",
    );
    assert_eq!(crate_roots(&code), ["node", "request", "session"]);
}
