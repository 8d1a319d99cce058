//! `structuredContent` from outside, on a real `mcp-node` process: a tool
//! result carries it only when the tool returns structured data. The text
//! tool `echo` answers without it and the built-in `add` (which declares an
//! output schema) with it, valid against the `outputSchema` that
//! `tools/list` gave, in every revision (2024-11-05 … 2025-11-25 and the
//! stateless 2026-07-28) and on every transport: Streamable HTTP answered in
//! JSON and in SSE, the legacy HTTP+SSE transport, stdio, and the result of
//! a 2026-07-28 task.

mod stateless_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{GUARD, NodeProcess, node_binary, open_legacy_sse, within};
use serde_json::{Value, json};

/// The session-era revisions.
const SESSION_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// What `add` must answer for `{"a": 2, "b": 3}`.
fn five() -> Value {
    json!({"sum": 5.0})
}

fn node(args: &[&str]) -> NodeProcess {
    NodeProcess::spawn(&node_binary(), args).expect("node started")
}

/// `add`'s output schema, from a `tools/list` result.
fn add_schema(list: &Value) -> Value {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {list}"))
        .iter()
        .find(|t| t["name"] == "add")
        .unwrap_or_else(|| panic!("no add tool in {list}"))["outputSchema"]
        .clone()
}

/// A text-only tool result: content, and no `structuredContent` at all.
#[track_caller]
fn assert_text_only(what: &str, response: &Value) {
    let result = &response["result"];
    assert!(
        result.get("structuredContent").is_none(),
        "{what}: a text tool's result carries structuredContent: {response}"
    );
    assert_eq!(result["isError"], false, "{what}: {response}");
    let content = result["content"].as_array().expect("content");
    assert!(!content.is_empty(), "{what}: empty content: {response}");
    assert_eq!(content[0]["text"], "Echo: hello", "{what}: {response}");
}

/// `add`'s result: `structuredContent` `{"sum": 5.0}`, valid against the
/// output schema the node listed, and the same as text in `content`.
#[track_caller]
fn assert_structured(what: &str, response: &Value, schema: &Value) {
    let result = &response["result"];
    let structured = result
        .get("structuredContent")
        .unwrap_or_else(|| panic!("{what}: no structuredContent: {response}"));
    assert_eq!(structured, &five(), "{what}: {response}");
    let validator = jsonschema::validator_for(schema)
        .unwrap_or_else(|err| panic!("{what}: outputSchema {schema} does not compile: {err}"));
    let errors: Vec<String> = validator
        .iter_errors(structured)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{what}: {structured} against {schema}: {errors:?}"
    );
    let text = result["content"][0]["text"].as_str().expect("text content");
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        five(),
        "{what}: {response}"
    );
}

fn echo_params() -> Value {
    json!({"name": "echo", "arguments": {"message": "hello"}})
}

fn add_params() -> Value {
    json!({"name": "add", "arguments": {"a": 2, "b": 3}})
}

/// POSTs a `tools/call` in `client`'s session and reads its answer, which
/// must come as `sse` says (JSON or an SSE stream).
async fn call(client: &Client, params: Value, sse: bool) -> Value {
    let id = client.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
    match within("tools/call", client.post(&body)).await.unwrap() {
        Reply::Json(response, _) => {
            assert!(!sse, "answered in JSON, expected SSE: {response}");
            response
        }
        Reply::Sse(mut stream) => {
            assert!(sse, "answered in SSE, expected JSON");
            loop {
                let message = within("SSE message", stream.next_message())
                    .await
                    .unwrap()
                    .expect("the stream ended before the response");
                if message["id"] == id {
                    return message;
                }
            }
        }
        other => panic!("tools/call: {other:?}"),
    }
}

async fn streamable_http_sessions(node: &NodeProcess, sse: bool) {
    for version in SESSION_VERSIONS {
        let what = format!("{version} {}", if sse { "SSE" } else { "JSON" });
        let mut client = Client::new(node.url(), version);
        let init = within("initialize", client.initialize(json!({})))
            .await
            .unwrap();
        assert_eq!(init["protocolVersion"], version);
        let (list, _) = within("tools/list", client.request("tools/list", json!({})))
            .await
            .unwrap();
        let schema = add_schema(&list);

        assert_text_only(&what, &call(&client, echo_params(), sse).await);
        assert_structured(&what, &call(&client, add_params(), sse).await, &schema);
    }
}

#[tokio::test]
async fn streamable_http_json_answers_carry_structured_content_only_for_structured_tools() {
    let node = node(&["--response-mode", "auto"]);
    streamable_http_sessions(&node, false).await;
}

#[tokio::test]
async fn streamable_http_sse_answers_carry_structured_content_only_for_structured_tools() {
    let node = node(&["--response-mode", "sse"]);
    streamable_http_sessions(&node, true).await;
}

/// The next `message` event of a legacy stream, as JSON.
async fn next_legacy_message(stream: &mut SseStream) -> Value {
    loop {
        let event = within("legacy event", stream.next_event())
            .await
            .unwrap()
            .expect("the legacy stream ended");
        if event.event.as_deref() == Some("message") {
            return serde_json::from_str(&event.data).unwrap();
        }
    }
}

#[tokio::test]
async fn legacy_http_sse_answers_carry_structured_content_only_for_structured_tools() {
    let node = node(&[]);
    let base = node.url().trim_end_matches("/mcp").to_owned();
    let http = reqwest::Client::new();
    for version in SESSION_VERSIONS {
        let (mut stream, url) = open_legacy_sse(&http, &base).await;
        let mut exchange = async |body: Value| {
            let status = within(
                "POST",
                http.post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send(),
            )
            .await
            .unwrap()
            .status();
            assert_eq!(status, 202, "{body}");
            if body.get("id").is_none() {
                return Value::Null;
            }
            let answer = next_legacy_message(&mut stream).await;
            assert_eq!(answer["id"], body["id"], "{answer}");
            answer
        };
        let init = exchange(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "structured", "version": "0"}}}),
        )
        .await;
        assert_eq!(init["result"]["protocolVersion"], version);
        exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        let list = exchange(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
        let schema = add_schema(&list);

        let what = format!("legacy {version}");
        let echo = exchange(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": echo_params()}),
        )
        .await;
        assert_text_only(&what, &echo);
        let add = exchange(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": add_params()}),
        )
        .await;
        assert_structured(&what, &add, &schema);
    }
}

#[test]
fn stdio_answers_carry_structured_content_only_for_structured_tools() {
    for version in SESSION_VERSIONS {
        let mut child = Command::new(node_binary())
            .arg("--stdio")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("mcp-node --stdio (cargo build -p mcp-node)");
        let mut stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut exchange = |body: Value| {
            writeln!(stdin, "{body}").unwrap();
            stdin.flush().unwrap();
            if body.get("id").is_none() {
                return Value::Null;
            }
            loop {
                let line = lines.recv_timeout(GUARD).expect("a stdout line in time");
                let message: Value = serde_json::from_str(&line).unwrap();
                if message["id"] == body["id"] && message.get("method").is_none() {
                    return message;
                }
            }
        };
        let init = exchange(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "structured", "version": "0"}}}),
        );
        assert_eq!(init["result"]["protocolVersion"], version);
        exchange(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let list = exchange(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        let schema = add_schema(&list);

        let what = format!("stdio {version}");
        let echo = exchange(
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": echo_params()}),
        );
        assert_text_only(&what, &echo);
        let add = exchange(
            json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": add_params()}),
        );
        assert_structured(&what, &add, &schema);

        drop(stdin);
        let mut exited = false;
        for _ in 0..(GUARD.as_millis() / 20) {
            if child.try_wait().unwrap().is_some() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !exited {
            let _ = child.kill();
            panic!("mcp-node --stdio did not exit when stdin closed");
        }
    }
}

async fn stateless_calls(node: &NodeProcess, sse: bool) {
    use stateless_support::{call, request, tool_call};
    let what = format!("2026-07-28 {}", if sse { "SSE" } else { "JSON" });
    let url = node.url();
    let list = call(url, &request(1, "tools/list", json!({}), json!({})), &[]).await;
    assert_eq!(list.status, 200, "{list:?}");
    let schema = add_schema(&list.response);

    let echo = call(
        url,
        &tool_call(2, "echo", json!({"message": "hello"}), json!({}), json!({})),
        &[],
    )
    .await;
    assert_eq!(echo.status, 200, "{echo:?}");
    assert_eq!(
        echo.response["result"]["resultType"], "complete",
        "{echo:?}"
    );
    assert_text_only(&what, &echo.response);

    let add = call(
        url,
        &tool_call(3, "add", json!({"a": 2, "b": 3}), json!({}), json!({})),
        &[],
    )
    .await;
    assert_eq!(add.status, 200, "{add:?}");
    assert_structured(&what, &add.response, &schema);
}

#[tokio::test]
async fn stateless_answers_carry_structured_content_only_for_structured_tools() {
    let json_node = node(&["--response-mode", "auto"]);
    stateless_calls(&json_node, false).await;
    let sse_node = node(&["--response-mode", "sse"]);
    stateless_calls(&sse_node, true).await;
}

#[tokio::test]
async fn a_finished_text_task_carries_no_structured_content() {
    use stateless_support::{call, request, tool_call};
    let node = node(&[]);
    let url = node.url();
    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});

    let created = call(
        url,
        &tool_call(
            1,
            "slow_compute",
            json!({"seconds": 0, "label": "x"}),
            json!({}),
            caps.clone(),
        ),
        &[],
    )
    .await;
    assert_eq!(
        created.response["result"]["resultType"], "task",
        "{created:?}"
    );
    let task = created.response["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    let mut done = None;
    for id in 2..200 {
        let got = call(
            url,
            &request(id, "tasks/get", json!({"taskId": task}), caps.clone()),
            &[],
        )
        .await;
        if got.response["result"]["status"] == "completed" {
            done = Some(got.response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = done.expect("the task completes");
    let result = &done["result"]["result"];
    assert!(
        result.get("structuredContent").is_none(),
        "a text task's result carries structuredContent: {done}"
    );
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("Computed x"), "{done}");
}
