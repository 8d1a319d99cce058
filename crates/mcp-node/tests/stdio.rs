//! `mcp-node --stdio`: newline-delimited JSON-RPC on stdin/stdout, one
//! session, nothing but protocol lines on stdout, exit 0 when stdin closes.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use serde_json::{Value, json};

/// Hang guard for every read and for the exit.
const GUARD: Duration = Duration::from_secs(10);

/// The node process with its stdout lines arriving on a channel.
struct StdioNode {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl StdioNode {
    fn spawn() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-node"))
            .arg("--stdio")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: &Value) {
        self.send_raw(&message.to_string());
    }

    /// The next stdout line, which must be one JSON object.
    fn receive(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(GUARD)
            .expect("no line on stdout in time");
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|err| panic!("stdout carried a non-JSON line ({err}): {line:?}"));
        assert!(value.is_object(), "{line}");
        assert_eq!(value["jsonrpc"], "2.0", "{line}");
        value
    }

    /// Sends a request and returns its response.
    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let response = self.receive();
        assert_eq!(response["id"], id, "{response}");
        response
    }

    fn initialize(&mut self) -> Value {
        let init = self.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "stdio-test", "version": "0"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init
    }

    /// Closes stdin and waits (bounded) for the exit code.
    fn close_and_wait(mut self) -> Option<i32> {
        drop(self.stdin.take());
        let poll = Duration::from_millis(20);
        for _ in 0..GUARD.as_millis() / poll.as_millis() {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(poll);
        }
        panic!("the process did not exit after stdin closed");
    }

    /// Every remaining stdout line, until the process closes stdout.
    fn rest(&self) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            match self.lines.recv_timeout(GUARD) {
                Ok(line) => out.push(serde_json::from_str(&line).unwrap_or_else(|err| {
                    panic!("stdout carried a non-JSON line ({err}): {line:?}")
                })),
                Err(mpsc::RecvTimeoutError::Disconnected) => return out,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("stdout did not close"),
            }
        }
    }
}

impl Drop for StdioNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_stdio_session_lists_and_calls_tools_then_exits_cleanly() {
    let mut node = StdioNode::spawn();
    let init = node.initialize();
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert!(init["result"]["serverInfo"]["name"].is_string());

    let listed = node.request(2, "tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "echo"), "{listed}");

    let echo = node.request(
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "over stdio"}}),
    );
    assert_eq!(echo["result"]["content"][0]["text"], "Echo: over stdio");

    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn a_garbage_line_gets_a_parse_error_and_the_session_goes_on() {
    let mut node = StdioNode::spawn();
    node.initialize();

    node.send_raw("this is not json");
    let error = node.receive();
    assert_eq!(error["error"]["code"], -32700, "{error}");
    assert_eq!(error["id"], Value::Null);

    // Blank lines are ignored; the session still answers.
    node.send_raw("");
    let pong = node.request(2, "ping", json!({}));
    assert_eq!(pong["result"], json!({}));

    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn requests_before_initialize_are_refused_except_ping() {
    let mut node = StdioNode::spawn();

    let early = node.request(1, "tools/list", json!({}));
    assert_eq!(early["error"]["code"], -32600, "{early}");
    let pong = node.request(2, "ping", json!({}));
    assert_eq!(pong["result"], json!({}));

    let init = node.request(
        3,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "stdio-test", "version": "0"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    let again = node.request(
        4,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "stdio-test", "version": "0"}}),
    );
    assert_eq!(again["error"]["code"], -32600, "{again}");

    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn closing_stdin_right_away_exits_with_status_zero() {
    let node = StdioNode::spawn();
    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn a_tool_that_closes_its_sse_stream_still_answers_over_stdio() {
    let mut node = StdioNode::spawn();
    node.initialize();

    let response = node.request(2, "tools/call", json!({"name": "test_reconnection"}));
    assert_eq!(response["result"]["isError"], false, "{response}");
    let pong = node.request(3, "ping", json!({}));
    assert_eq!(pong["result"], json!({}));

    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn a_server_request_over_stdio_is_answered_on_stdin() {
    let mut node = StdioNode::spawn();
    node.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
               "clientInfo": {"name": "stdio-test", "version": "0"}}),
    );
    node.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    node.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "list_roots", "arguments": {}}}));
    let ask = node.receive();
    assert_eq!(ask["method"], "roots/list", "{ask}");
    node.send(&json!({"jsonrpc": "2.0", "id": ask["id"],
                      "result": {"roots": [{"uri": "file:///stdio", "name": "stdio"}]}}));
    let response = node.receive();
    assert_eq!(response["id"], 2, "{response}");
    let text = response["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("file:///stdio"), "{text}");

    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn a_2025_11_25_task_over_stdio_asks_on_the_one_stream() {
    let mut node = StdioNode::spawn();
    let init = node.request(
        1,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
               "clientInfo": {"name": "stdio-test", "version": "0"}}),
    );
    assert_eq!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"],
        json!({}),
        "{init}"
    );
    node.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    let created = node.request(
        2,
        "tools/call",
        json!({"name": "confirm_delete", "arguments": {"filename": "c.txt"}, "task": {}}),
    );
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Asked once the client polled the task: the question and the poll's
    // answer share the one stream, in either order.
    node.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
                      "params": {"taskId": task}}));
    let (first, second) = (node.receive(), node.receive());
    let (got, ask) = if first["id"] == 3 {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(got["result"]["taskId"], task.as_str(), "{got}");
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(
        ask["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    node.send(&json!({"jsonrpc": "2.0", "id": ask["id"],
                      "result": {"action": "accept", "content": {"confirm": true}}}));
    let result = node.request(4, "tasks/result", json!({"taskId": task}));
    assert_eq!(
        result["result"]["content"][0]["text"], "Deleted c.txt.",
        "{result}"
    );
    let got = node.request(5, "tasks/get", json!({"taskId": task}));
    assert_eq!(got["result"]["status"], "completed", "{got}");

    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn requests_read_before_stdin_closes_are_answered_before_exit() {
    let mut node = StdioNode::spawn();
    // A piped client: everything at once, then EOF.
    node.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "stdio-test", "version": "0"}}}),
    );
    node.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    node.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "long_running_operation", "arguments": {"duration_ms": 200, "steps": 2},
        "_meta": {"progressToken": "p"}}}),
    );
    node.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": "last"}}}));
    drop(node.stdin.take());

    let lines = node.rest();
    let ids: Vec<&Value> = lines
        .iter()
        .filter(|m| m.get("method").is_none())
        .map(|m| &m["id"])
        .collect();
    assert_eq!(ids.len(), 3, "every request is answered: {lines:?}");
    for id in [json!(1), json!(2), json!(3)] {
        assert!(ids.contains(&&id), "no answer to {id}: {lines:?}");
    }
    let progress = lines
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 2, "{lines:?}");
    assert_eq!(node.close_and_wait(), Some(0));
}

/// The `_meta` of a 2026-07-28 request.
fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "stdio-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

/// A 2026-07-28 `tools/call`, with more `_meta` fields when given.
fn modern_call(id: i64, name: &str, arguments: Value, extra_meta: Value) -> Value {
    let mut meta = modern_meta(json!({"elicitation": {}}));
    if let (Some(meta), Some(extra)) = (meta.as_object_mut(), extra_meta.as_object()) {
        meta.extend(extra.clone());
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments, "_meta": meta}})
}

#[test]
fn the_2026_07_28_era_is_served_over_stdio_beside_the_session() {
    let mut node = StdioNode::spawn();
    let discover = node.request(
        1,
        "server/discover",
        json!({"_meta": modern_meta(json!({}))}),
    );
    let versions = discover["result"]["supportedVersions"].to_string();
    assert!(versions.contains("2026-07-28"), "{discover}");

    // A call with progress: its notifications, then its result.
    node.send(&modern_call(
        2,
        "long_running_operation",
        json!({"duration_ms": 200, "steps": 2}),
        json!({"progressToken": "p"}),
    ));
    let (first, second, result) = (node.receive(), node.receive(), node.receive());
    assert_eq!(first["method"], "notifications/progress", "{first}");
    assert_eq!(second["params"]["progress"], 2.0, "{second}");
    assert_eq!(result["id"], 2, "{result}");
    assert!(result["result"]["content"].is_array(), "{result}");

    // A question: an input_required result, answered by the retry.
    node.send(&modern_call(
        3,
        "test_input_required_result_elicitation",
        json!({}),
        json!({}),
    ));
    let round = node.receive();
    assert_eq!(round["id"], 3, "{round}");
    let asks = round["result"]["inputRequests"].as_object().unwrap();
    let (key, ask) = asks.iter().next().unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{round}");
    let mut retry = modern_call(
        4,
        "test_input_required_result_elicitation",
        json!({}),
        json!({}),
    );
    retry["params"]["requestState"] = round["result"]["requestState"].clone();
    retry["params"]["inputResponses"] =
        json!({ key: {"action": "accept", "content": {"name": "Stdio"}} });
    node.send(&retry);
    let done = node.receive();
    assert_eq!(done["id"], 4, "{done}");
    assert_eq!(
        done["result"]["content"][0]["text"], "Hello, Stdio!",
        "{done}"
    );

    // The session era on the same pipe.
    node.initialize();
    let echo = node.request(
        5,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "session"}}),
    );
    assert_eq!(
        echo["result"]["content"][0]["text"], "Echo: session",
        "{echo}"
    );
    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn notifications_cancelled_stops_a_2026_07_28_request_over_stdio() {
    let mut node = StdioNode::spawn();
    node.send(&modern_call(
        7,
        "long_running_operation",
        json!({"duration_ms": 60_000, "steps": 600}),
        json!({"progressToken": "long"}),
    ));
    let progress = node.receive();
    assert_eq!(progress["params"]["progressToken"], "long", "{progress}");
    // As a 2026-07-28 client cancels on stdio, where no stream closes.
    node.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 7, "reason": "enough"}}),
    );
    // Whatever the request had under way may still arrive; then nothing of
    // it, while the pipe goes on serving.
    std::thread::sleep(Duration::from_millis(300));
    while node.lines.try_recv().is_ok() {}
    std::thread::sleep(Duration::from_millis(500));
    node.send(&modern_call(
        8,
        "echo",
        json!({"message": "after"}),
        json!({}),
    ));
    let next = node.receive();
    assert_eq!(next["id"], 8, "the cancelled request went on: {next}");
    assert_eq!(
        next["result"]["content"][0]["text"], "Echo: after",
        "{next}"
    );
    assert_eq!(node.close_and_wait(), Some(0));
}

#[test]
fn a_2026_07_28_listen_over_stdio_streams_changes_and_ends_with_stdin() {
    let mut node = StdioNode::spawn();
    node.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                      "params": {"notifications": {"toolsListChanged": true},
                                 "_meta": modern_meta(json!({}))}}),
    );
    let ack = node.receive();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    node.send(&modern_call(
        2,
        "test_trigger_tool_change",
        json!({}),
        json!({}),
    ));
    let mut seen = Vec::new();
    while !(seen.iter().any(|m: &Value| m["id"] == 2)
        && seen
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed"))
    {
        seen.push(node.receive());
    }
    let change = seen
        .iter()
        .find(|m| m["method"] == "notifications/tools/list_changed")
        .unwrap();
    assert_eq!(
        change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 1,
        "{change}"
    );
    // The open listen stream does not hold the process once stdin closes.
    assert_eq!(node.close_and_wait(), Some(0));
}
