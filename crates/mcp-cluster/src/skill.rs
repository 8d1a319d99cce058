//! Skills: the `io.modelcontextprotocol/skills` extension (SEP-2640). A
//! skill is a folder whose `SKILL.md` begins with YAML frontmatter (at
//! least `name` and `description`) and whatever files go with it. Clients
//! list skills (`skills/list`), get one (`skills/get`) with a manifest of
//! every file (SHA-256 digest and size), read the files as resources
//! (`skill://<path>/<file>`) and list a folder's children
//! (`resources/directory/read`).
//!
//! A provider adds skills to its [`crate::ServerBuilder`] in code
//! ([`SkillDef::new`] and [`SkillDef::file`]) or from a folder
//! ([`skills_in`]); `mcp-node` serves those of `--skills-dir`. Skills are
//! read once, into memory, bounded as the extension says (512 files and
//! 16 MiB per skill).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mcp_cluster_protocol::ErrorObject;
use mcp_cluster_protocol::types::{Resource, ResourceContents};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The extension's identifier in `capabilities.extensions`.
pub const EXTENSION: &str = "io.modelcontextprotocol/skills";
/// Most files in one skill, its `SKILL.md` included.
pub const MAX_FILES: usize = 512;
/// Most bytes in one skill, all its files together.
pub const MAX_BYTES: u64 = 16 * 1024 * 1024;
/// The file that makes a folder a skill.
const SKILL_MD: &str = "SKILL.md";
/// The URI scheme of skill files.
const SCHEME: &str = "skill://";
/// The MIME type of a folder (`resources/directory/read`).
const DIRECTORY_MIME: &str = "inode/directory";
/// Longest skill name.
const MAX_NAME: usize = 64;

/// A skill that cannot be served, and why.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// Its path, a file's path, its frontmatter or its size breaks a rule.
    #[error("skill {path}: {reason}")]
    Invalid {
        /// The skill's path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be read.
    #[error("reading {file}: {source}")]
    Io {
        /// The file or folder.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

/// One file of a skill, with what its manifest entry says of it.
#[derive(Debug)]
struct SkillFile {
    bytes: Vec<u8>,
    mime: &'static str,
    /// `sha256:` and the lowercase hex digest of `bytes`.
    digest: String,
}

/// A skill: its path (`acme/billing/refunds`; the last segment is its
/// name), its frontmatter and its files by path within it.
#[derive(Debug, Clone)]
pub struct SkillDef {
    path: String,
    frontmatter: Map<String, Value>,
    files: BTreeMap<String, Arc<SkillFile>>,
}

impl SkillDef {
    /// A skill at `path` (one or more `/`-separated segments, the last its
    /// name) whose `SKILL.md` is `skill_md`.
    ///
    /// # Errors
    /// A bad path, or frontmatter that is missing, not YAML, without a
    /// `name` and `description`, or whose `name` is not the path's last
    /// segment.
    pub fn new(path: &str, skill_md: &str) -> Result<Self, SkillError> {
        let invalid = |reason: String| SkillError::Invalid {
            path: path.to_owned(),
            reason,
        };
        let segments: Vec<&str> = path.split('/').collect();
        if let Some(bad) = segments.iter().find(|s| !is_segment(s)) {
            return Err(invalid(format!(
                "{bad:?} is not a path segment (letters, digits, '-', '_', '.', '~')"
            )));
        }
        let frontmatter = frontmatter(skill_md).map_err(invalid)?;
        let name = segments[segments.len() - 1];
        if !is_name(name) {
            return Err(invalid(format!(
                "the name {name:?} must be 1 to {MAX_NAME} of a-z, 0-9 and single '-' inside"
            )));
        }
        if frontmatter.get("name").and_then(Value::as_str) != Some(name) {
            return Err(invalid(format!(
                "the frontmatter's name must be {name:?}, the path's last segment"
            )));
        }
        let skill = Self {
            path: path.to_owned(),
            frontmatter,
            files: BTreeMap::new(),
        };
        skill.file(SKILL_MD, skill_md.as_bytes().to_vec())
    }

    /// Adds the file at `relative` (`templates/invoice.md`) within the
    /// skill.
    ///
    /// # Errors
    /// A bad path, `SKILL.md` given twice, or more files or bytes than a
    /// skill may hold.
    pub fn file(mut self, relative: &str, bytes: impl Into<Vec<u8>>) -> Result<Self, SkillError> {
        let bytes = bytes.into();
        let invalid = |reason: String| SkillError::Invalid {
            path: self.path.clone(),
            reason,
        };
        if !relative.split('/').all(is_segment) {
            return Err(invalid(format!("{relative:?} is not a file path")));
        }
        if self.files.contains_key(relative) {
            return Err(invalid(format!("{relative} is given twice")));
        }
        let files = &mut self.files;
        if files.keys().any(|f| f.starts_with(&format!("{relative}/")))
            || parents(relative).any(|p| files.contains_key(p))
        {
            return Err(invalid(format!("{relative} is both a file and a folder")));
        }
        let total: u64 =
            files.values().map(|f| f.bytes.len() as u64).sum::<u64>() + bytes.len() as u64;
        if files.len() >= MAX_FILES || total > MAX_BYTES {
            return Err(invalid(format!(
                "more than {MAX_FILES} files or {MAX_BYTES} bytes"
            )));
        }
        let digest = format!("sha256:{:x}", Sha256::digest(&bytes));
        files.insert(
            relative.to_owned(),
            Arc::new(SkillFile {
                mime: mime_of(relative),
                bytes,
                digest,
            }),
        );
        Ok(self)
    }

    /// The skill in folder `dir`, at `path`: its `SKILL.md` and every file
    /// under it (hidden ones left out), nested skills' files included.
    ///
    /// # Errors
    /// As [`SkillDef::new`] and [`SkillDef::file`]; a file that cannot be
    /// read, or a symbolic link (never followed out of the folder).
    pub fn from_dir(dir: &Path, path: &str) -> Result<Self, SkillError> {
        let read = |file: &Path| {
            std::fs::read(file).map_err(|source| SkillError::Io {
                file: file.display().to_string(),
                source,
            })
        };
        let skill_md = read(&dir.join(SKILL_MD))?;
        let skill_md = String::from_utf8(skill_md).map_err(|_| SkillError::Invalid {
            path: path.to_owned(),
            reason: "SKILL.md is not UTF-8".to_owned(),
        })?;
        let mut skill = Self::new(path, &skill_md)?;
        for entry in walk(dir)? {
            let relative = entry
                .strip_prefix(dir)
                .unwrap_or(&entry)
                .to_string_lossy()
                .replace('\\', "/");
            if relative != SKILL_MD {
                skill = skill.file(&relative, read(&entry)?)?;
            }
        }
        Ok(skill)
    }

    /// Its name: the last segment of its path.
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// The URI of its folder, `skill://<path>`.
    fn root(&self) -> String {
        format!("{SCHEME}{}", self.path)
    }

    /// The URI of its `SKILL.md`.
    pub fn uri(&self) -> String {
        format!("{SCHEME}{}/{SKILL_MD}", self.path)
    }

    /// Its `skills/list` and `skills/get` entry: URI, frontmatter and the
    /// manifest of every file.
    pub(crate) fn entry(&self) -> Value {
        let root = self.root();
        let resources: Vec<Value> = self
            .files
            .iter()
            .map(|(relative, file)| {
                json!({"uri": format!("{root}/{relative}"), "digest": file.digest,
                       "size": file.bytes.len()})
            })
            .collect();
        json!({"uri": self.uri(), "frontmatter": self.frontmatter, "resources": resources})
    }

    /// Its `SKILL.md` as a resource of `resources/list`.
    pub(crate) fn listed(&self) -> Resource {
        let text = |key: &str| self.frontmatter.get(key).and_then(Value::as_str);
        Resource {
            uri: self.uri(),
            name: self.name().to_owned(),
            title: None,
            description: text("description").map(str::to_owned),
            mime_type: Some("text/markdown".to_owned()),
            icons: None,
        }
    }

    /// The path within the skill that `uri` names (`""` for its folder),
    /// if `uri` is under it.
    fn relative<'u>(&self, uri: &'u str) -> Option<&'u str> {
        let rest = uri.strip_prefix(SCHEME)?.strip_prefix(&self.path)?;
        match rest {
            "" => Some(""),
            rest => rest.strip_prefix('/'),
        }
    }

    /// The contents of the file at `uri`, if it is one of this skill's:
    /// text when it is UTF-8 of a textual type, else base64.
    pub(crate) fn read(&self, uri: &str) -> Option<ResourceContents> {
        let file = self.files.get(self.relative(uri)?)?;
        let text = is_textual(file.mime)
            .then(|| std::str::from_utf8(&file.bytes).ok())
            .flatten()
            .filter(|text| !text.contains('\0'));
        Some(match text {
            Some(text) => ResourceContents::text(uri, file.mime, text),
            None => ResourceContents::blob(uri, file.mime, STANDARD.encode(&file.bytes)),
        })
    }

    /// The children of the folder at `uri` (files with their type,
    /// folders as `inode/directory`), or `None` if `uri` is not one of
    /// this skill's folders.
    pub(crate) fn children(&self, uri: &str) -> Option<Vec<Resource>> {
        let relative = self.relative(uri)?;
        let prefix = if relative.is_empty() {
            String::new()
        } else {
            format!("{relative}/")
        };
        let mut children: BTreeMap<&str, Option<&'static str>> = BTreeMap::new();
        for (path, file) in self.files.iter() {
            let Some(rest) = path.strip_prefix(&prefix) else {
                continue;
            };
            match rest.split_once('/') {
                Some((folder, _)) => children.insert(folder, None),
                None => children.insert(rest, Some(file.mime)),
            };
        }
        if children.is_empty() {
            return None;
        }
        let base = uri.trim_end_matches('/');
        Some(
            children
                .into_iter()
                .map(|(name, mime)| Resource {
                    uri: format!("{base}/{name}"),
                    name: name.to_owned(),
                    title: None,
                    description: None,
                    mime_type: Some(mime.unwrap_or(DIRECTORY_MIME).to_owned()),
                    icons: None,
                })
                .collect(),
        )
    }

    /// Whether `uri` is one of its files.
    pub(crate) fn has_file(&self, uri: &str) -> bool {
        self.relative(uri)
            .is_some_and(|r| self.files.contains_key(r))
    }
}

/// Every skill under `root`: each folder holding a `SKILL.md` is one, at
/// its path below `root` (`root/acme/refunds` is `skill://acme/refunds`),
/// in path order. Hidden files and folders are left out.
///
/// # Errors
/// The first skill that cannot be served ([`SkillDef::from_dir`]), or
/// `root` not a folder.
pub fn skills_in(root: &Path) -> Result<Vec<SkillDef>, SkillError> {
    let mut skills = Vec::new();
    for file in walk(root)? {
        if file.file_name().is_some_and(|n| n == SKILL_MD)
            && let Some(dir) = file.parent()
            && dir != root
        {
            let path = dir
                .strip_prefix(root)
                .unwrap_or(dir)
                .to_string_lossy()
                .replace('\\', "/");
            skills.push(SkillDef::from_dir(dir, &path)?);
        }
    }
    Ok(skills)
}

/// Every file under `dir`, in path order, hidden entries left out.
///
/// # Errors
/// A folder that cannot be read, or a symbolic link.
fn walk(dir: &Path) -> Result<Vec<std::path::PathBuf>, SkillError> {
    let mut files = Vec::new();
    let entries = walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in entries {
        let entry = entry.map_err(|err| SkillError::Io {
            file: dir.display().to_string(),
            source: err.into(),
        })?;
        if entry.path_is_symlink() {
            return Err(SkillError::Invalid {
                path: entry.path().display().to_string(),
                reason: "symbolic links are not followed".to_owned(),
            });
        }
        if entry.file_type().is_file() {
            files.push(entry.into_path());
        }
    }
    Ok(files)
}

/// The parent folders of `relative` (`a/b/c` gives `a/b`, `a`).
fn parents(relative: &str) -> impl Iterator<Item = &str> {
    relative
        .char_indices()
        .filter(|(_, c)| *c == '/')
        .map(|(at, _)| &relative[..at])
}

/// The frontmatter of a `SKILL.md`: the YAML between its first two `---`
/// lines, an object with a non-empty `name` and `description`.
fn frontmatter(skill_md: &str) -> Result<Map<String, Value>, String> {
    let text = skill_md.strip_prefix('\u{feff}').unwrap_or(skill_md);
    let body = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("SKILL.md must begin with a '---' line (YAML frontmatter)")?;
    let mut yaml_end = None;
    let mut at = 0;
    for line in body.split_inclusive('\n') {
        if line
            .trim_end_matches(['\n', '\r'])
            .trim_end_matches([' ', '\t'])
            == "---"
        {
            yaml_end = Some(at);
            break;
        }
        at += line.len();
    }
    let yaml = &body[..yaml_end.ok_or("SKILL.md's frontmatter has no closing '---' line")?];
    let value: Value =
        yaml_serde::from_str(yaml).map_err(|err| format!("its frontmatter is not YAML: {err}"))?;
    let Value::Object(map) = value else {
        return Err("its frontmatter is not a mapping".to_owned());
    };
    for key in ["name", "description"] {
        if map
            .get(key)
            .and_then(Value::as_str)
            .is_none_or(|v| v.trim().is_empty())
        {
            return Err(format!("its frontmatter has no {key}"));
        }
    }
    Ok(map)
}

/// A skill name: 1 to 64 of `a-z`, `0-9` and `-`, no `-` first, last or
/// twice in a row.
fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// A segment of a skill's path, or of a file's path within it: unreserved
/// URI characters only, not `.` or `..`.
fn is_segment(segment: &str) -> bool {
    !segment.is_empty()
        && segment != "."
        && segment != ".."
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
}

/// The MIME type of a file, by its extension.
fn mime_of(path: &str) -> &'static str {
    let extension = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "md" | "markdown" => "text/markdown",
        "txt" => "text/plain",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "js" | "mjs" => "text/javascript",
        "py" => "text/x-python",
        "sh" => "text/x-shellscript",
        "json" => "application/json",
        "yaml" | "yml" => "application/yaml",
        "toml" => "application/toml",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}

/// Whether a file of type `mime` is served as text (when it is UTF-8).
fn is_textual(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/json"
                | "application/yaml"
                | "application/toml"
                | "application/xml"
                | "image/svg+xml"
        )
}

/// The skills of a server, indexed by the URI of their `SKILL.md`.
#[derive(Debug, Default, Clone)]
pub(crate) struct Skills {
    skills: Vec<SkillDef>,
}

impl Skills {
    /// Adds `skill`, replacing one at the same path.
    pub(crate) fn add(&mut self, skill: SkillDef) {
        self.skills.retain(|s| s.path != skill.path);
        self.skills.push(skill);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Every skill, in the order they were added.
    pub(crate) fn all(&self) -> &[SkillDef] {
        &self.skills
    }

    /// `skills/get`: the skill whose `SKILL.md` is at `uri`.
    ///
    /// # Errors
    /// `-32602` when none is.
    pub(crate) fn get(&self, uri: &str) -> Result<&SkillDef, ErrorObject> {
        self.skills.iter().find(|s| s.uri() == uri).ok_or_else(|| {
            ErrorObject::invalid_params(format!("no skill is served at {uri}"))
                .with_data(json!({"uri": uri}))
        })
    }

    /// `resources/read` of a skill's file.
    pub(crate) fn read(&self, uri: &str) -> Option<ResourceContents> {
        self.skills.iter().find_map(|s| s.read(uri))
    }

    /// Whether `uri` is a skill's file.
    pub(crate) fn has_file(&self, uri: &str) -> bool {
        self.skills.iter().any(|s| s.has_file(uri))
    }

    /// `resources/directory/read`: the children of a skill's folder.
    ///
    /// # Errors
    /// `-32602` when `uri` is no skill's folder (a file, or nothing).
    pub(crate) fn children(&self, uri: &str) -> Result<Vec<Resource>, ErrorObject> {
        // The longest path first: a nested skill's folder is its own.
        let mut under: Vec<&SkillDef> = self
            .skills
            .iter()
            .filter(|s| s.relative(uri).is_some())
            .collect();
        under.sort_by_key(|s| std::cmp::Reverse(s.path.len()));
        under
            .into_iter()
            .find_map(|s| s.children(uri))
            .ok_or_else(|| {
                ErrorObject::invalid_params(format!("{uri} is not a directory resource"))
                    .with_data(json!({"uri": uri}))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PDF: &str = "---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF documents\n---\n\n# PDF processing\n\nChoose the matching template from `templates/`.\n";

    #[test]
    fn a_skill_s_manifest_names_every_file_with_its_digest_and_size() {
        let skill = SkillDef::new("pdf-processing", PDF)
            .unwrap()
            .file("templates/invoice.md", "# Invoice\n")
            .unwrap();
        let entry = skill.entry();
        assert_eq!(entry["uri"], "skill://pdf-processing/SKILL.md");
        assert_eq!(
            entry["frontmatter"],
            json!({"name": "pdf-processing", "description": "Extract, fill, and assemble PDF documents"})
        );
        // The digest the extension's own example gives for these bytes.
        assert_eq!(
            entry["resources"][0],
            json!({"uri": "skill://pdf-processing/SKILL.md", "size": 151,
                   "digest": "sha256:99b737495721155ece826d57521e2d66141ebdc1344a400487481ea2642ab19e"})
        );
        assert_eq!(
            entry["resources"][1]["uri"],
            "skill://pdf-processing/templates/invoice.md"
        );
        assert_eq!(entry["resources"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn folders_list_their_children_and_files_are_not_folders() {
        let skill = SkillDef::new(
            "acme/billing/refunds",
            &PDF.replace("pdf-processing", "refunds"),
        )
        .unwrap()
        .file("examples/email.md", "hi")
        .unwrap()
        .file("examples/deep/more.txt", "x")
        .unwrap();
        let mut skills = Skills::default();
        skills.add(skill);
        let root = skills.children("skill://acme/billing/refunds").unwrap();
        let names: Vec<(&str, &str)> = root
            .iter()
            .map(|r| (r.name.as_str(), r.mime_type.as_deref().unwrap()))
            .collect();
        assert_eq!(
            names,
            [
                ("SKILL.md", "text/markdown"),
                ("examples", "inode/directory")
            ]
        );
        let examples = skills
            .children("skill://acme/billing/refunds/examples")
            .unwrap();
        assert_eq!(
            examples[0].uri,
            "skill://acme/billing/refunds/examples/deep"
        );
        assert_eq!(
            examples[1].uri,
            "skill://acme/billing/refunds/examples/email.md"
        );
        for not_a_folder in [
            "skill://acme/billing/refunds/SKILL.md",
            "skill://acme/billing/refundsX",
            "skill://acme/billing",
            "skill://acme/billing/refunds/nothing",
        ] {
            let err = skills.children(not_a_folder).unwrap_err();
            assert_eq!(err.code, mcp_cluster_protocol::ErrorCode::INVALID_PARAMS);
        }
        assert!(skills.has_file("skill://acme/billing/refunds/examples/email.md"));
        assert!(!skills.has_file("skill://acme/billing/refunds/examples"));
        let read = skills
            .read("skill://acme/billing/refunds/SKILL.md")
            .unwrap();
        assert!(matches!(read, ResourceContents::Text { .. }), "{read:?}");
        assert_eq!(
            skills.get("skill://nope/SKILL.md").unwrap_err().code,
            mcp_cluster_protocol::ErrorCode::INVALID_PARAMS
        );
    }

    #[test]
    fn bad_skills_are_refused_with_the_reason() {
        let cases = [
            ("Bad-Name", PDF.replace("pdf-processing", "Bad-Name")),
            ("a--b", PDF.replace("pdf-processing", "a--b")),
            ("other", PDF.to_owned()),
            ("pdf-processing", "no frontmatter".to_owned()),
            (
                "pdf-processing",
                "---\nname: pdf-processing\n---\n".to_owned(),
            ),
            ("pdf-processing", "---\nname: [unclosed\n---\n".to_owned()),
            ("../x", PDF.replace("pdf-processing", "x")),
        ];
        for (path, text) in cases {
            assert!(SkillDef::new(path, &text).is_err(), "{path}: {text}");
        }
        let skill = SkillDef::new("pdf-processing", PDF).unwrap();
        assert!(skill.clone().file("../escape", "x").is_err());
        assert!(skill.clone().file("SKILL.md", "x").is_err());
        let with = skill.file("a/b", "x").unwrap();
        assert!(with.clone().file("a", "x").is_err());
        assert!(with.clone().file("a/b/c", "x").is_err());
        let big = vec![0u8; usize::try_from(MAX_BYTES).unwrap()];
        assert!(with.file("big.bin", big).is_err());
    }

    #[test]
    fn the_frontmatter_is_every_field_of_the_yaml() {
        let text = "\u{feff}---\r\nname: x\r\ndescription: d\r\nlicense: MIT\r\nmetadata:\r\n  version: \"2\"\r\n---   \r\nbody";
        let skill = SkillDef::new("x", text).unwrap();
        assert_eq!(
            skill.entry()["frontmatter"],
            json!({"name": "x", "description": "d", "license": "MIT", "metadata": {"version": "2"}})
        );
    }

    #[test]
    fn a_folder_of_skills_is_read_with_hidden_files_left_out() {
        let dir = std::env::temp_dir().join(format!("skills-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pdf-processing/templates")).unwrap();
        std::fs::create_dir_all(dir.join("pdf-processing/.hidden")).unwrap();
        std::fs::create_dir_all(dir.join("acme/refunds")).unwrap();
        std::fs::write(dir.join("pdf-processing/SKILL.md"), PDF).unwrap();
        std::fs::write(dir.join("pdf-processing/templates/a.md"), "a").unwrap();
        std::fs::write(dir.join("pdf-processing/.hidden/b"), "b").unwrap();
        std::fs::write(
            dir.join("acme/refunds/SKILL.md"),
            PDF.replace("pdf-processing", "refunds"),
        )
        .unwrap();
        let skills = skills_in(&dir).unwrap();
        let uris: Vec<String> = skills.iter().map(SkillDef::uri).collect();
        assert_eq!(
            uris,
            [
                "skill://acme/refunds/SKILL.md",
                "skill://pdf-processing/SKILL.md"
            ]
        );
        assert_eq!(skills[1].entry()["resources"].as_array().unwrap().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
