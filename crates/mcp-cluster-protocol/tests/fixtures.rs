#![allow(clippy::unwrap_used)]
//! Golden fixtures per protocol revision.
//!
//! `tests/fixtures/<version>/<slug>.<kind>.json` holds one message as a peer
//! of that revision sends it, valid against the revision's official schema
//! (`schema/<version>/schema.json` in modelcontextprotocol/modelcontextprotocol).
//! `slug` is the method with `/` spelled `-` (`tools-call`,
//! `notifications-progress`); `kind` is `request`, `notification`, `result`
//! or `error`. Every fixture must decode and re-encode to the same JSON.
//!
//! Fixtures with typed params or results are also read into the types of
//! `mcp_cluster_protocol::types` and written back; what the types emit is kept in
//! `tests/fixtures/<version>/golden/<slug>.<kind>.json`. It may differ from
//! the fixture (an empty `nextCursor` is dropped, fields the types do not model are
//! dropped; `structuredContent` stays exactly as present or absent); a change to it fails the test
//! until the goldens are rewritten with `UPDATE_GOLDENS=1 cargo test -p
//! mcp-cluster-protocol --test fixtures`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use mcp_cluster_protocol::jsonrpc::{Body, decode_body, decode_message};
use mcp_cluster_protocol::methods;
use mcp_cluster_protocol::types::{
    CallToolParams, CallToolResult, CancelledParams, CompleteParams, CompleteResult,
    CreateMessageParams, CreateMessageResult, ElicitParams, ElicitResult, GetPromptParams,
    GetPromptResult, InitializeParams, InitializeResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListRootsResult, ListToolsResult,
    LoggingMessageParams, PaginatedParams, ProgressParams, ReadResourceResult, SetLevelParams,
    UriParams, empty_result,
};
use mcp_cluster_protocol::{
    ErrorCode, ErrorObject, Message, Notification, ProtocolVersion, Request, Response,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Set to `1` to rewrite the golden files instead of comparing with them.
const UPDATE_GOLDENS: &str = "UPDATE_GOLDENS";

/// What a fixture file holds, from the last dot-separated part of its stem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Request,
    Notification,
    Result,
    Error,
}

#[derive(Debug)]
struct Fixture {
    version: ProtocolVersion,
    /// File name without `.json`, e.g. `tools-call.result`.
    stem: String,
    /// The method the message belongs to, from the slug.
    method: String,
    kind: Kind,
    bytes: Vec<u8>,
    json: Value,
}

impl Fixture {
    fn name(&self) -> String {
        format!("{}/{}.json", self.version, self.stem)
    }

    fn golden_path(&self) -> PathBuf {
        version_dir(self.version)
            .join("golden")
            .join(format!("{}.json", self.stem))
    }
}

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn version_dir(version: ProtocolVersion) -> PathBuf {
    fixtures_root().join(version.as_str())
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

fn load(version: ProtocolVersion) -> Vec<Fixture> {
    let files = json_files(&version_dir(version));
    assert!(!files.is_empty(), "no fixtures for {version}");
    files
        .into_iter()
        .map(|path| {
            let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
            let (slug, kind) = stem
                .rsplit_once('.')
                .unwrap_or_else(|| panic!("{version}/{stem}.json: name is not <slug>.<kind>"));
            let kind = match kind {
                "request" => Kind::Request,
                "notification" => Kind::Notification,
                "result" => Kind::Result,
                "error" => Kind::Error,
                other => panic!("{version}/{stem}.json: unknown kind {other:?}"),
            };
            let bytes = fs::read(&path).unwrap();
            let json = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{version}/{stem}.json: not JSON: {e}"));
            Fixture {
                version,
                method: slug.replace('-', "/"),
                stem,
                kind,
                bytes,
                json,
            }
        })
        .collect()
}

fn all_fixtures() -> Vec<Fixture> {
    ProtocolVersion::ALL.into_iter().flat_map(load).collect()
}

fn find(fixtures: &[Fixture], stem: &str) -> Option<usize> {
    fixtures.iter().position(|f| f.stem == stem)
}

fn reencoded(message: &Message) -> Value {
    serde_json::from_str(&message.to_json()).unwrap()
}

/// Reads a JSON value as `T` and writes it back.
type Retype = fn(Value) -> Result<Value, serde_json::Error>;

fn retype<T: DeserializeOwned + Serialize>(value: Value) -> Result<Value, serde_json::Error> {
    serde_json::to_value(serde_json::from_value::<T>(value)?)
}

/// The type of a request's or notification's params, if `types` has one.
fn params_type(method: &str) -> Option<Retype> {
    Some(match method {
        methods::INITIALIZE => retype::<InitializeParams>,
        methods::TOOLS_LIST
        | methods::RESOURCES_LIST
        | methods::RESOURCES_TEMPLATES_LIST
        | methods::PROMPTS_LIST => retype::<PaginatedParams>,
        methods::TOOLS_CALL => retype::<CallToolParams>,
        methods::RESOURCES_READ
        | methods::RESOURCES_SUBSCRIBE
        | methods::RESOURCES_UNSUBSCRIBE
        | methods::NOTIFICATION_RESOURCES_UPDATED => retype::<UriParams>,
        methods::PROMPTS_GET => retype::<GetPromptParams>,
        methods::COMPLETION_COMPLETE => retype::<CompleteParams>,
        methods::LOGGING_SET_LEVEL => retype::<SetLevelParams>,
        methods::SAMPLING_CREATE_MESSAGE => retype::<CreateMessageParams>,
        methods::ELICITATION_CREATE => retype::<ElicitParams>,
        methods::NOTIFICATION_PROGRESS => retype::<ProgressParams>,
        methods::NOTIFICATION_CANCELLED => retype::<CancelledParams>,
        methods::NOTIFICATION_MESSAGE => retype::<LoggingMessageParams>,
        _ => return None,
    })
}

/// The type of a method's result, if `types` has one.
fn result_type(method: &str) -> Option<Retype> {
    Some(match method {
        methods::INITIALIZE => retype::<InitializeResult>,
        methods::TOOLS_LIST => retype::<ListToolsResult>,
        methods::TOOLS_CALL => retype::<CallToolResult>,
        methods::RESOURCES_LIST => retype::<ListResourcesResult>,
        methods::RESOURCES_TEMPLATES_LIST => retype::<ListResourceTemplatesResult>,
        methods::RESOURCES_READ => retype::<ReadResourceResult>,
        methods::PROMPTS_LIST => retype::<ListPromptsResult>,
        methods::PROMPTS_GET => retype::<GetPromptResult>,
        methods::COMPLETION_COMPLETE => retype::<CompleteResult>,
        methods::SAMPLING_CREATE_MESSAGE => retype::<CreateMessageResult>,
        methods::ROOTS_LIST => retype::<ListRootsResult>,
        methods::ELICITATION_CREATE => retype::<ElicitResult>,
        _ => return None,
    })
}

/// Methods whose result is `{}`.
const EMPTY_RESULTS: [&str; 4] = [
    methods::PING,
    methods::LOGGING_SET_LEVEL,
    methods::RESOURCES_SUBSCRIBE,
    methods::RESOURCES_UNSUBSCRIBE,
];

fn as_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("params re-serialized to a non-object: {other}"),
    }
}

/// The message our types emit for a fixture, or `None` when nothing in it is
/// typed.
fn emitted(fixture: &Fixture, message: Message) -> Result<Option<Value>, String> {
    let err = |e: serde_json::Error| format!("{}: does not fit our types: {e}", fixture.name());
    let message = match message {
        Message::Request(r) => {
            let Some(retype) = params_type(&r.method) else {
                return Ok(None);
            };
            let params = retype(Value::Object(r.params.unwrap_or_default())).map_err(err)?;
            Message::Request(Request {
                params: Some(as_object(params)),
                ..r
            })
        }
        Message::Notification(n) => {
            let Some(retype) = params_type(&n.method) else {
                return Ok(None);
            };
            let params = retype(Value::Object(n.params.unwrap_or_default())).map_err(err)?;
            Message::Notification(Notification {
                params: Some(as_object(params)),
                ..n
            })
        }
        Message::Response(Response {
            id,
            outcome: Ok(result),
            ..
        }) => {
            let Some(retype) = result_type(&fixture.method) else {
                return Ok(None);
            };
            Message::Response(Response::new(id, Ok(retype(result).map_err(err)?)))
        }
        Message::Response(Response {
            id,
            outcome: Err(error),
            ..
        }) => {
            let error: ErrorObject =
                serde_json::from_value(serde_json::to_value(error).unwrap()).map_err(err)?;
            Message::Response(Response::error(id, error))
        }
    };
    Ok(Some(reencoded(&message)))
}

/// Rebuilds every object with its keys in sorted order, so golden files are
/// written the same way whatever map serde_json was built with.
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let keys: BTreeSet<&String> = map.keys().collect();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// One line per difference, `-` for the golden side, `+` for what the types
/// emit, each with a JSON path.
fn diff(path: &str, golden: &Value, emitted: &Value, out: &mut Vec<String>) {
    match (golden, emitted) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let at = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(&at, x, y, out),
                    (Some(x), None) => out.push(format!("  - {at}: {x}")),
                    (None, Some(y)) => out.push(format!("  + {at}: {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if golden == emitted => {}
        _ => {
            out.push(format!("  - {path}: {golden}"));
            out.push(format!("  + {path}: {emitted}"));
        }
    }
}

fn pretty(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(&sorted(value)).unwrap();
    text.push('\n');
    text
}

#[test]
fn every_fixture_decodes_and_reencodes_unchanged() {
    let mut failures = Vec::new();
    for fixture in all_fixtures() {
        let name = fixture.name();
        let body = match decode_body(&fixture.bytes) {
            Ok(body) => body,
            Err(e) => {
                failures.push(format!("{name}: does not decode: {e} ({})", e.code.0));
                continue;
            }
        };
        let messages = match body {
            Body::Single(message) => {
                assert_eq!(
                    decode_message(&fixture.bytes).as_ref(),
                    Ok(&message),
                    "{name}: decode_message and decode_body disagree"
                );
                let kind = match &message {
                    Message::Request(r) => {
                        assert_eq!(r.method, fixture.method, "{name}: method");
                        Kind::Request
                    }
                    Message::Notification(n) => {
                        assert_eq!(n.method, fixture.method, "{name}: method");
                        Kind::Notification
                    }
                    Message::Response(Response { outcome: Ok(_), .. }) => Kind::Result,
                    Message::Response(Response {
                        outcome: Err(_), ..
                    }) => Kind::Error,
                };
                assert_eq!(kind, fixture.kind, "{name}: decoded as another kind");
                vec![(message, fixture.json.clone())]
            }
            Body::Batch(items) => {
                let elements = fixture.json.as_array().unwrap();
                assert_eq!(items.len(), elements.len(), "{name}: batch length");
                items
                    .into_iter()
                    .zip(elements.iter().cloned())
                    .map(|(item, json)| (item.unwrap(), json))
                    .collect()
            }
        };
        for (message, mut json) in messages {
            // 2025-11-25 lets an error response omit its id; we write `null`
            // as JSON-RPC 2.0 section 5 asks, which older peers expect.
            if let Value::Object(map) = &mut json
                && map.contains_key("error")
                && !map.contains_key("id")
            {
                map.insert("id".into(), Value::Null);
            }
            if reencoded(&message) != json {
                failures.push(format!(
                    "{name}: re-encodes differently:\n  fixture: {json}\n  encoded: {}",
                    message.to_json()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn typed_params_and_results_match_the_goldens() {
    let update = std::env::var(UPDATE_GOLDENS).is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for version in ProtocolVersion::ALL {
        let fixtures = load(version);
        let mut expected_goldens = BTreeSet::new();
        for fixture in &fixtures {
            let Ok(Body::Single(message)) = decode_body(&fixture.bytes) else {
                continue;
            };
            if fixture.kind == Kind::Result && EMPTY_RESULTS.contains(&fixture.method.as_str()) {
                let Message::Response(Response { outcome: Ok(r), .. }) = &message else {
                    unreachable!("kind checked by every_fixture_decodes_and_reencodes_unchanged");
                };
                assert_eq!(r, &empty_result(), "{}: result is not {{}}", fixture.name());
            }
            let emitted = match emitted(fixture, message) {
                Ok(Some(emitted)) => emitted,
                Ok(None) => continue,
                Err(e) => {
                    failures.push(e);
                    continue;
                }
            };
            let path = fixture.golden_path();
            expected_goldens.insert(path.clone());
            if update {
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(&path, pretty(&emitted)).unwrap();
                continue;
            }
            let golden: Value = match fs::read(&path) {
                Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
                Err(_) => {
                    failures.push(format!(
                        "{}: no golden at {}; run with {UPDATE_GOLDENS}=1",
                        fixture.name(),
                        path.display()
                    ));
                    continue;
                }
            };
            if golden != emitted {
                let mut lines = Vec::new();
                diff("$", &golden, &emitted, &mut lines);
                failures.push(format!(
                    "{}: the types emit something other than the golden \
                     (- golden, + emitted; {UPDATE_GOLDENS}=1 rewrites it if intended):\n{}",
                    fixture.name(),
                    lines.join("\n")
                ));
            }
        }
        for stale in json_files(&version_dir(version).join("golden")) {
            if expected_goldens.contains(&stale) {
                continue;
            }
            if update {
                fs::remove_file(&stale).unwrap();
            } else {
                failures.push(format!(
                    "{}: golden without a typed fixture; {UPDATE_GOLDENS}=1 removes it",
                    stale.display()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

#[test]
fn batches_exist_and_decode_only_under_2025_03_26() {
    for version in ProtocolVersion::ALL {
        let fixtures = load(version);
        assert_eq!(
            version.allows_batches(),
            version == ProtocolVersion::V2025_03_26,
            "{version}: allows_batches"
        );
        let batch = find(&fixtures, "batch.request");
        assert_eq!(
            batch.is_some(),
            version.allows_batches(),
            "{version}: a batch fixture exists exactly where batches are allowed"
        );
        for fixture in &fixtures {
            let is_array = fixture.json.is_array();
            assert_eq!(
                is_array,
                fixture.stem == "batch.request",
                "{}: only batch.request is an array",
                fixture.name()
            );
        }
        let Some(i) = batch else { continue };
        let bytes = &fixtures[i].bytes;
        let Body::Batch(items) = decode_body(bytes).unwrap() else {
            panic!("{version}: batch.request did not decode as a batch");
        };
        assert!(items.len() > 1 && items.iter().all(Result::is_ok));
        // A transport that takes single messages only rejects the batch.
        assert_eq!(
            decode_message(bytes).unwrap_err().code,
            ErrorCode::INVALID_REQUEST
        );
    }
}

#[test]
fn negotiation_echoes_each_revision_of_the_fixtures() {
    for version in ProtocolVersion::ALL {
        let fixtures = load(version);
        let request = &fixtures[find(&fixtures, "initialize.request").unwrap()];
        let Ok(Message::Request(request)) = decode_message(&request.bytes) else {
            panic!("{version}: initialize.request is not a request");
        };
        let params: InitializeParams = request.parse_params().unwrap();
        assert_eq!(params.protocol_version, version.as_str());
        assert_eq!(
            ProtocolVersion::negotiate(&params.protocol_version),
            version
        );

        let result = &fixtures[find(&fixtures, "initialize.result").unwrap()];
        let result: InitializeResult =
            serde_json::from_value(result.json["result"].clone()).unwrap();
        assert_eq!(result.protocol_version, version.as_str());
    }
}

#[test]
fn revision_specific_messages_and_fields_appear_where_the_schema_has_them() {
    const EVERY_REVISION: [&str; 39] = [
        "initialize.request",
        "initialize.result",
        "notifications-initialized.notification",
        "ping.request",
        "ping.result",
        "tools-list.request",
        "tools-list.result",
        "tools-call.request",
        "tools-call.result",
        "tools-call.error",
        "resources-list.request",
        "resources-list.result",
        "resources-read.request",
        "resources-read.result",
        "resources-read.error",
        "resources-templates-list.request",
        "resources-templates-list.result",
        "resources-subscribe.request",
        "resources-subscribe.result",
        "prompts-list.request",
        "prompts-list.result",
        "prompts-get.request",
        "prompts-get.result",
        "completion-complete.request",
        "completion-complete.result",
        "logging-setLevel.request",
        "logging-setLevel.result",
        "notifications-progress.notification",
        "notifications-cancelled.notification",
        "notifications-message.notification",
        "notifications-resources-updated.notification",
        "notifications-tools-list_changed.notification",
        "notifications-resources-list_changed.notification",
        "notifications-prompts-list_changed.notification",
        "notifications-roots-list_changed.notification",
        "sampling-createMessage.request",
        "sampling-createMessage.result",
        "roots-list.request",
        "roots-list.result",
    ];
    for version in ProtocolVersion::ALL {
        let fixtures = load(version);
        for stem in EVERY_REVISION {
            assert!(find(&fixtures, stem).is_some(), "{version}: no {stem}.json");
        }
        let get = |stem: &str| &fixtures[find(&fixtures, stem).unwrap()].json;

        let elicitation = find(&fixtures, "elicitation-create.request").is_some();
        assert_eq!(
            elicitation,
            version.has_elicitation(),
            "{version}: elicitation"
        );

        // `message` on progress notifications: 2025-03-26 and later.
        let progress = &get("notifications-progress.notification")["params"];
        assert_eq!(
            progress.get("message").is_some(),
            version >= ProtocolVersion::V2025_03_26,
            "{version}: progress message"
        );

        // Audio content and tool annotations: 2025-03-26 and later.
        let audio = fixtures
            .iter()
            .any(|f| f.json.to_string().contains(r#""type":"audio""#));
        let annotations = get("tools-list.result")["result"]["tools"][0]
            .get("annotations")
            .is_some();
        let since_2025_03_26 = version >= ProtocolVersion::V2025_03_26;
        assert!(!audio || since_2025_03_26, "{version}: audio content");
        assert_eq!(annotations, since_2025_03_26, "{version}: tool annotations");

        // Structured content and output schemas: 2025-06-18 and later.
        let structured = get("tools-call.result")["result"]
            .get("structuredContent")
            .is_some();
        let output_schema = get("tools-list.result")["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t.get("outputSchema").is_some());
        let since_2025_06_18 = version >= ProtocolVersion::V2025_06_18;
        assert_eq!(structured, since_2025_06_18, "{version}: structuredContent");
        assert_eq!(output_schema, since_2025_06_18, "{version}: outputSchema");

        // An error response may omit its id from 2025-11-25 on.
        let idless = fixtures
            .iter()
            .filter(|f| f.kind == Kind::Error && f.json.get("id").is_none())
            .count();
        assert_eq!(
            idless > 0,
            version >= ProtocolVersion::V2025_11_25,
            "{version}: error responses without an id"
        );
    }
}

#[test]
fn error_fixtures_carry_the_codes_the_crate_names() {
    for version in ProtocolVersion::ALL {
        let fixtures = load(version);
        for (stem, code) in [
            ("tools-call.error", ErrorCode::INVALID_PARAMS),
            ("resources-read.error", ErrorCode::RESOURCE_NOT_FOUND),
        ] {
            let fixture = &fixtures[find(&fixtures, stem).unwrap()];
            let Ok(Message::Response(Response {
                id: Some(_),
                outcome: Err(error),
                ..
            })) = decode_message(&fixture.bytes)
            else {
                panic!("{}: not an error response with an id", fixture.name());
            };
            assert_eq!(error.code, code, "{}", fixture.name());
        }
    }
}

#[test]
fn typed_tool_results_carry_structured_content_only_when_the_fixture_does() {
    for version in ProtocolVersion::ALL {
        let fixtures = load(version);
        let Some(i) = find(&fixtures, "tools-call.result") else {
            continue;
        };
        let sent = &fixtures[i].json["result"];
        let typed = retype::<CallToolResult>(sent.clone()).unwrap();
        // Text-only results stay text-only: no `{}` appears for clients
        // that prefer `structuredContent` when present.
        assert_eq!(
            typed.get("structuredContent"),
            sent.get("structuredContent"),
            "{version}: {typed}"
        );
        assert!(
            !typed["content"].as_array().unwrap().is_empty(),
            "{version}"
        );
    }
}
