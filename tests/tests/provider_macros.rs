//! The provider API v2 from outside: a server written with `#[server]`,
//! `#[tool]`, `#[resource]` and `#[prompt]` (plus one tool added with the
//! builder), served by a node over real HTTP and called as a client would.
//! Derived input and output schemas are listed and enforced (bad arguments
//! never reach the method), `?` turns errors into `isError` results or
//! JSON-RPC errors, the request context reports progress and asks the
//! client (session era and 2026-07-28), a cancellation stops the method,
//! a scope guards a tool and the principal reaches it, and the per-tool
//! limits given as attribute options hold.

mod auth_support;
mod stateless_support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use mcp_cluster::NodeConfig;
use mcp_cluster::prelude::*;
use mcp_cluster::protocol::types::ElicitParams;
use mcp_cluster_client::{Client, Reply, SseStream};
use mcp_cluster_testkit::{InProcessNode, NodeProcess, TestIssuer, example_binary, within};
use serde_json::{Value, json};
use stateless_support::{Messages, accept, all_caps, call, send, tool_call};
use tokio::sync::Notify;

/// The provider's state: what the tests observe of its methods.
#[derive(Default)]
struct Lab {
    /// Runs of `divide`'s body.
    divisions: AtomicUsize,
    /// `wait` was stopped (its future dropped before it ended).
    stopped: Notify,
}

/// Notifies when dropped: a method holding one was stopped.
struct OnDrop<'a>(&'a Notify);

impl Drop for OnDrop<'_> {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Quotient {
    /// a / b.
    quotient: f64,
}

#[derive(serde::Serialize)]
struct Square {
    n: u64,
    square: u64,
}

#[server(name = "lab", version = "9.9.9", instructions = "Tools for tests.")]
impl Lab {
    /// Divides a by b.
    #[tool(read_only, idempotent)]
    async fn divide(
        &self,
        /// The dividend.
        a: f64,
        /// The divisor, not zero.
        b: f64,
    ) -> Result<Json<Quotient>, HandlerError> {
        self.divisions.fetch_add(1, Ordering::SeqCst);
        if b == 0.0 {
            return Err(HandlerError::tool("division by zero"));
        }
        Ok(Json(Quotient { quotient: a / b }))
    }

    /// Reads a text file.
    #[tool]
    async fn read(&self, path: PathBuf) -> Result<String, HandlerError> {
        let text = std::fs::read_to_string(&path)?;
        Ok(text)
    }

    /// Looks a key up; there are none.
    #[tool(name = "look_up", title = "Look up")]
    async fn lookup(&self, key: String) -> Result<String, HandlerError> {
        Err(ErrorObject::invalid_params(format!("no such key: {key}")))?
    }

    /// Reports `steps` progress steps at once, then one every 50 ms until
    /// stopped (its writes tell a 2026-07-28 node that the client left).
    #[tool]
    async fn wait(&self, steps: u32, ctx: &RequestContext) -> Result<String, HandlerError> {
        let _stopped = OnDrop(&self.stopped);
        for step in 1.. {
            if step > steps {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            ctx.progress(step.into(), None, None).await?;
        }
        Ok("never".into())
    }

    /// Asks the user's name.
    #[tool]
    async fn ask_name(&self, ctx: &RequestContext) -> Result<String, HandlerError> {
        let answer = ctx
            .elicit(ElicitParams {
                message: "Your name?".into(),
                requested_schema: json!({"type": "object",
                    "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            })
            .await?;
        let name = answer
            .content
            .as_ref()
            .and_then(|c| c.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("nobody");
        Ok(format!("{}: {name}", answer.action))
    }

    /// Sleeps its thread; one call at a time, stopped after a second.
    #[tool(blocking, max_concurrent = 1, time_limit = "1s")]
    fn nap(&self, ms: u64) -> String {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        format!("slept {ms} ms")
    }

    /// Needs a scope.
    #[tool(scopes = ["lab:admin"], destructive)]
    async fn reset(&self) -> String {
        self.divisions.store(0, Ordering::SeqCst);
        "reset".into()
    }

    /// Who calls, with the scopes of their token.
    #[tool]
    async fn whoami(&self, ctx: &RequestContext) -> String {
        match ctx.principal() {
            Some(principal) => format!("{} {}", principal.subject, principal.scopes.join(" ")),
            None => "anonymous".into(),
        }
    }

    /// The message of the day.
    #[resource("lab://motd", mime_type = "text/plain")]
    async fn motd(&self) -> String {
        "hello from the lab".into()
    }

    /// Squares of numbers.
    #[resource("lab://squares/{n}", name = "square")]
    fn square(&self, n: u64) -> Json<Square> {
        Json(Square { n, square: n * n })
    }

    /// Asks for a review of some code.
    #[prompt(title = "Code review")]
    async fn review(
        &self,
        /// The code to review.
        code: String,
        /// Its language.
        language: Option<String>,
    ) -> String {
        let language = language.as_deref().unwrap_or("an unknown language");
        format!("Review this code, written in {language}:\n{code}")
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Shout {
    text: String,
}

/// The lab's methods plus a tool from the builder; the test keeps the
/// state.
fn start() -> (InProcessNode, Arc<Lab>) {
    let lab = Arc::new(Lab::default());
    let server = Arc::clone(&lab)
        .shared_builder()
        .tool(ToolDef::typed(
            "shout",
            "Upper-cases the text.",
            |args: Shout, _| async move { Ok(CallToolResult::text(args.text.to_uppercase())) },
        ))
        .build();
    let node = InProcessNode::start_default(server).expect("node started");
    (node, lab)
}

async fn request(client: &Client, method: &str, params: Value) -> (Value, Vec<Value>) {
    within(method, client.request(method, params))
        .await
        .unwrap()
}

async fn call_tool(client: &Client, name: &str, arguments: Value) -> Value {
    let (response, _) = request(
        client,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    response
}

fn text(response: &Value) -> &str {
    response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {response}"))
}

fn tool<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {list}"))
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {list}"))
}

async fn next_message(stream: &mut SseStream) -> Value {
    within("next message", stream.next_message())
        .await
        .unwrap()
        .expect("the stream ended")
}

#[tokio::test]
async fn listings_show_what_the_methods_declare() {
    let (node, _) = start();
    let mut client = node.client();
    let init = within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    assert_eq!(init["serverInfo"]["name"], "lab", "{init}");
    assert_eq!(init["serverInfo"]["version"], "9.9.9", "{init}");
    assert_eq!(init["instructions"], "Tools for tests.", "{init}");

    let (list, _) = request(&client, "tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "divide", "read", "look_up", "wait", "ask_name", "nap", "reset", "whoami", "shout"
        ],
        "declaration order, then the builder's tool"
    );

    let divide = tool(&list, "divide");
    assert_eq!(divide["description"], "Divides a by b.");
    let input = &divide["inputSchema"];
    assert_eq!(input["type"], "object", "{input}");
    assert_eq!(input["properties"]["a"]["type"], "number", "{input}");
    assert_eq!(input["properties"]["a"]["description"], "The dividend.");
    assert_eq!(
        input["properties"]["b"]["description"],
        "The divisor, not zero."
    );
    let mut required: Vec<&str> = input["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["a", "b"], "{input}");
    let output = &divide["outputSchema"];
    assert_eq!(output["type"], "object", "{divide}");
    assert_eq!(
        output["properties"]["quotient"]["type"], "number",
        "{output}"
    );
    assert_eq!(output["properties"]["quotient"]["description"], "a / b.");
    assert_eq!(divide["annotations"]["readOnlyHint"], true, "{divide}");
    assert_eq!(divide["annotations"]["idempotentHint"], true, "{divide}");

    let look_up = tool(&list, "look_up");
    assert_eq!(look_up["title"], "Look up", "{look_up}");
    // Text tools declare no output schema; a tool without arguments takes
    // an object all the same.
    assert!(tool(&list, "read").get("outputSchema").is_none(), "{list}");
    assert_eq!(tool(&list, "ask_name")["inputSchema"]["type"], "object");
    assert_eq!(tool(&list, "reset")["annotations"]["destructiveHint"], true);
    assert_eq!(
        tool(&list, "shout")["inputSchema"]["required"],
        json!(["text"])
    );

    let (resources, _) = request(&client, "resources/list", json!({})).await;
    assert_eq!(
        resources["result"]["resources"],
        json!([{"uri": "lab://motd", "name": "motd", "description": "The message of the day.",
                "mimeType": "text/plain"}]),
        "{resources}"
    );
    let (templates, _) = request(&client, "resources/templates/list", json!({})).await;
    assert_eq!(
        templates["result"]["resourceTemplates"],
        json!([{"uriTemplate": "lab://squares/{n}", "name": "square",
                "description": "Squares of numbers."}]),
        "{templates}"
    );
    let (prompts, _) = request(&client, "prompts/list", json!({})).await;
    assert_eq!(
        prompts["result"]["prompts"],
        json!([{"name": "review", "title": "Code review",
                "description": "Asks for a review of some code.",
                "arguments": [
                    {"name": "code", "description": "The code to review.", "required": true},
                    {"name": "language", "description": "Its language.", "required": false}]}]),
        "{prompts}"
    );
}

#[tokio::test]
async fn calls_are_checked_before_and_after_the_method() {
    let (node, lab) = start();
    let client = node.session(json!({})).await;
    let (list, _) = request(&client, "tools/list", json!({})).await;
    let output_schema = tool(&list, "divide")["outputSchema"].clone();

    // A good call: structuredContent valid against the listed schema, and
    // the same as text.
    let good = call_tool(&client, "divide", json!({"a": 7, "b": 2})).await;
    let result = &good["result"];
    assert_eq!(result["isError"], false, "{good}");
    assert_eq!(
        result["structuredContent"],
        json!({"quotient": 3.5}),
        "{good}"
    );
    let validator = jsonschema::validator_for(&output_schema).unwrap();
    assert!(validator.is_valid(&result["structuredContent"]), "{good}");
    let as_text: Value = serde_json::from_str(text(&good)).unwrap();
    assert_eq!(as_text, json!({"quotient": 3.5}));
    assert_eq!(lab.divisions.load(Ordering::SeqCst), 1);

    // Bad arguments: a tool error naming them (2025-11-25), and the method
    // does not run.
    for (what, arguments) in [
        ("a string for a number", json!({"a": "seven", "b": 2})),
        ("a missing argument", json!({"a": 7})),
    ] {
        let bad = call_tool(&client, "divide", arguments).await;
        assert_eq!(bad["result"]["isError"], true, "{what}: {bad}");
        assert!(
            text(&bad).starts_with("invalid arguments for tool divide"),
            "{what}: {bad}"
        );
    }
    assert_eq!(
        lab.divisions.load(Ordering::SeqCst),
        1,
        "the method ran for bad arguments"
    );
    // Before 2025-11-25 they are a JSON-RPC invalid-params error.
    let mut old = Client::new(&node.url(), "2025-06-18");
    within("initialize", old.initialize(json!({})))
        .await
        .unwrap();
    let bad = call_tool(&old, "divide", json!({"a": "seven", "b": 2})).await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert_eq!(lab.divisions.load(Ordering::SeqCst), 1);

    // A tool error returned by the method, and one from `?` on an
    // io::Error: isError results with their messages.
    let zero = call_tool(&client, "divide", json!({"a": 1, "b": 0})).await;
    assert_eq!(zero["result"]["isError"], true, "{zero}");
    assert_eq!(text(&zero), "division by zero");
    assert!(zero["result"].get("structuredContent").is_none(), "{zero}");
    let missing = call_tool(&client, "read", json!({"path": "/nonexistent/lab.txt"})).await;
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    assert!(text(&missing).contains("No such file"), "{missing}");
    let file = std::env::temp_dir().join(format!("provider-macros-{}.txt", std::process::id()));
    std::fs::write(&file, "lab notes").unwrap();
    let read = call_tool(&client, "read", json!({"path": file})).await;
    assert_eq!(text(&read), "lab notes", "{read}");
    std::fs::remove_file(&file).ok();

    // An ErrorObject through `?`: a JSON-RPC error.
    let protocol = call_tool(&client, "look_up", json!({"key": "k"})).await;
    assert_eq!(protocol["error"]["code"], -32602, "{protocol}");
    assert_eq!(protocol["error"]["message"], "no such key: k", "{protocol}");
    assert!(protocol.get("result").is_none(), "{protocol}");

    // The builder's tool beside the methods.
    let shout = call_tool(&client, "shout", json!({"text": "hi"})).await;
    assert_eq!(text(&shout), "HI", "{shout}");
}

#[tokio::test]
async fn progress_reaches_the_client_and_cancellation_reaches_the_method() {
    let (node, lab) = start();
    let client = node.session(json!({})).await;
    let id = client.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "wait", "arguments": {"steps": 3}, "_meta": {"progressToken": "w"}}});
    let Reply::Sse(mut stream) = within("call", client.post(&body)).await.unwrap() else {
        panic!("a call with progress is answered as SSE");
    };
    for step in 1..=3 {
        let progress = next_message(&mut stream).await;
        assert_eq!(progress["method"], "notifications/progress", "{progress}");
        assert_eq!(progress["params"]["progressToken"], "w", "{progress}");
        assert_eq!(
            progress["params"]["progress"],
            f64::from(step),
            "{progress}"
        );
    }
    let stopped = lab.stopped.notified();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "enough"}});
    within("cancel", client.post(&cancel)).await.unwrap();
    within("the method is stopped", stopped).await;
    // Nothing answers a cancelled request: its stream ends without a
    // response.
    while let Some(message) = within("end of the stream", stream.next_message())
        .await
        .unwrap()
    {
        assert_eq!(
            message["method"], "notifications/progress",
            "a cancelled call is not answered: {message}"
        );
    }

    // 2026-07-28: the same method, cancelled by the client closing the
    // call's response stream.
    let mut body = tool_call(1, "wait", json!({"steps": 2}), json!({}), json!({}));
    body["params"]["_meta"]["progressToken"] = json!("s");
    let mut messages = Messages::new(send(&node.url(), &body, &[]).await);
    for step in 1..=2 {
        let progress = messages.next().await.expect("progress before the end");
        assert_eq!(progress["method"], "notifications/progress", "{progress}");
        assert_eq!(
            progress["params"]["progress"],
            f64::from(step),
            "{progress}"
        );
    }
    let stopped = lab.stopped.notified();
    drop(messages);
    within("the stateless method is stopped", stopped).await;
}

#[tokio::test]
async fn the_context_asks_the_client_in_both_eras() {
    let (node, _) = start();

    // Session era: elicitation/create on the call's stream, the answer
    // POSTed back.
    let client = node.session(json!({"elicitation": {}})).await;
    let id = client.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "ask_name", "arguments": {}}});
    let Reply::Sse(mut stream) = within("call", client.post(&body)).await.unwrap() else {
        panic!("a call that asks the client is answered as SSE");
    };
    let ask = next_message(&mut stream).await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Your name?", "{ask}");
    let answer = json!({"jsonrpc": "2.0", "id": ask["id"],
        "result": {"action": "accept", "content": {"name": "Ann"}}});
    within("answer", client.post(&answer)).await.unwrap();
    let result = next_message(&mut stream).await;
    assert_eq!(result["id"], id, "{result}");
    assert_eq!(text(&result), "accept: Ann", "{result}");

    // Without the capability the question cannot be asked: `?` makes it a
    // tool error.
    let plain = node.session(json!({})).await;
    let refused = call_tool(&plain, "ask_name", json!({})).await;
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert!(text(&refused).contains("elicitation"), "{refused}");

    // 2026-07-28: the question comes back as an input_required result and
    // the retry brings the answer.
    let url = node.url();
    let first = call(
        &url,
        &tool_call(1, "ask_name", json!({}), json!({}), all_caps()),
        &[],
    )
    .await;
    let result = &first.response["result"];
    assert_eq!(result["resultType"], "input_required", "{first:?}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{first:?}");
    let (key, question) = requests.iter().next().unwrap();
    assert_eq!(question["method"], "elicitation/create", "{first:?}");
    assert_eq!(question["params"]["message"], "Your name?", "{first:?}");
    let state = result["requestState"].as_str().unwrap();
    let retry = tool_call(
        2,
        "ask_name",
        json!({}),
        json!({"inputResponses": {key.as_str(): accept("name", "Bo")}, "requestState": state}),
        all_caps(),
    );
    let second = call(&url, &retry, &[]).await;
    assert_eq!(second.response["result"]["isError"], false, "{second:?}");
    assert_eq!(
        second.response["result"]["content"][0]["text"], "accept: Bo",
        "{second:?}"
    );
}

#[tokio::test]
async fn attribute_limits_hold() {
    let (node, _) = start();
    let client = node.session(json!({})).await;
    // Within its limit a blocking call answers.
    let quick = call_tool(&client, "nap", json!({"ms": 10})).await;
    assert_eq!(text(&quick), "slept 10 ms", "{quick}");
    // Past it the call is stopped; its thread keeps its place until done,
    // so a second call meanwhile is refused as busy.
    let long = call_tool(&client, "nap", json!({"ms": 4000})).await;
    assert_eq!(long["error"]["code"], -32603, "{long}");
    let message = long["error"]["message"].as_str().unwrap();
    assert!(message.contains("time limit of 1s"), "{long}");
    let busy = call_tool(&client, "nap", json!({"ms": 10})).await;
    assert!(
        busy["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("is busy: 1 calls already running")),
        "{busy}"
    );
}

#[tokio::test]
async fn resources_and_prompts_come_from_methods() {
    let (node, _) = start();
    let client = node.session(json!({})).await;
    let (motd, _) = request(&client, "resources/read", json!({"uri": "lab://motd"})).await;
    assert_eq!(
        motd["result"]["contents"],
        json!([{"uri": "lab://motd", "mimeType": "text/plain", "text": "hello from the lab"}]),
        "{motd}"
    );
    let (square, _) = request(
        &client,
        "resources/read",
        json!({"uri": "lab://squares/12"}),
    )
    .await;
    let contents = &square["result"]["contents"][0];
    assert_eq!(contents["uri"], "lab://squares/12", "{square}");
    assert_eq!(contents["mimeType"], "application/json", "{square}");
    let value: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
    assert_eq!(value, json!({"n": 12, "square": 144}));
    // A variable that does not parse names no resource.
    let (nothing, _) = request(
        &client,
        "resources/read",
        json!({"uri": "lab://squares/twelve"}),
    )
    .await;
    assert_eq!(nothing["error"]["code"], -32002, "{nothing}");

    let (prompt, _) = request(
        &client,
        "prompts/get",
        json!({"name": "review", "arguments": {"code": "fn main() {}", "language": "Rust"}}),
    )
    .await;
    let message = &prompt["result"]["messages"][0];
    assert_eq!(message["role"], "user", "{prompt}");
    assert_eq!(
        message["content"]["text"], "Review this code, written in Rust:\nfn main() {}",
        "{prompt}"
    );
    let (defaulted, _) = request(
        &client,
        "prompts/get",
        json!({"name": "review", "arguments": {"code": "x"}}),
    )
    .await;
    assert!(
        defaulted["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("an unknown language"),
        "{defaulted}"
    );
    let (missing, _) = request(&client, "prompts/get", json!({"name": "review"})).await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
}

#[tokio::test]
async fn a_scope_guards_a_tool_and_the_principal_reaches_the_method() {
    use auth_support::{RESOURCE, call as rpc, param, post, session};

    let issuer = TestIssuer::start().await.unwrap();
    let config = NodeConfig::from_toml(&format!(
        "[auth]\nresource = \"{RESOURCE}\"\nissuers = [\"{}\"]\n",
        issuer.issuer()
    ))
    .unwrap();
    let node = InProcessNode::start(Lab::default().into_server(), config).unwrap();
    let url = node.url();

    let reader = issuer
        .token()
        .audience(RESOURCE)
        .subject("ann")
        .scopes(["lab:read"])
        .sign();
    let id = session(&url, &reader).await;
    let who = post(&url, Some(&reader), Some(&id), &rpc(1, "whoami", json!({}))).await;
    assert_eq!(
        who.body["result"]["content"][0]["text"], "ann lab:read",
        "{who:?}"
    );
    // `#[tool(scopes = ["lab:admin"])]`: 403 naming the scope (step-up).
    let refused = post(&url, Some(&reader), Some(&id), &rpc(2, "reset", json!({}))).await;
    assert_eq!(
        refused.status,
        reqwest::StatusCode::FORBIDDEN,
        "{refused:?}"
    );
    assert_eq!(
        param(refused.challenge(), "error").as_deref(),
        Some("insufficient_scope")
    );
    assert!(
        param(refused.challenge(), "scope").is_some_and(|s| s.contains("lab:admin")),
        "{refused:?}"
    );

    let admin = issuer
        .token()
        .audience(RESOURCE)
        .subject("ann")
        .scopes(["lab:read", "lab:admin"])
        .sign();
    let id = session(&url, &admin).await;
    let reset = post(&url, Some(&admin), Some(&id), &rpc(3, "reset", json!({}))).await;
    assert_eq!(
        reset.body["result"]["content"][0]["text"], "reset",
        "{reset:?}"
    );
}

/// The program `proto-docs/provider-api.md` shows, run as its reader
/// would: its three tools answer as the page says.
#[tokio::test]
async fn the_documented_program_serves_its_three_tools() {
    let program = NodeProcess::spawn(&example_binary("three_tools"), &[]).unwrap();
    let mut client = Client::new(program.url(), "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (list, _) = request(&client, "tools/list", json!({})).await;
    assert_eq!(
        list["result"]["tools"].as_array().unwrap().len(),
        3,
        "{list}"
    );
    assert_eq!(
        tool(&list, "add")["outputSchema"]["properties"]["sum"]["type"],
        "number"
    );
    assert_eq!(
        tool(&list, "read_file")["inputSchema"]["properties"]["path"]["description"],
        "Absolute path."
    );

    let sum = call_tool(&client, "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(
        sum["result"]["structuredContent"],
        json!({"sum": 5.0}),
        "{sum}"
    );
    let missing = call_tool(&client, "read_file", json!({"path": "/nonexistent/x"})).await;
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    let (done, notifications) = request(
        &client,
        "tools/call",
        json!({"name": "countdown", "arguments": {"from": 1}, "_meta": {"progressToken": 7}}),
    )
    .await;
    assert_eq!(text(&done), "liftoff", "{done}");
    assert_eq!(notifications.len(), 1, "{notifications:?}");
    assert_eq!(notifications[0]["params"]["progress"], 1.0);
}

/// The line counts `proto-docs/provider-api.md` gives for our side are
/// those of the compiled example it shows.
#[test]
fn the_documented_line_counts_are_the_examples() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("proto-docs/provider-api.md")).unwrap();
    let marker = "<!-- example: ";
    let path = doc
        .lines()
        .find_map(|l| l.strip_prefix(marker)?.strip_suffix(" -->"))
        .expect("the doc shows a compiled example");
    let source = std::fs::read_to_string(root.join(path)).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    let code = |lines: &[&str]| {
        lines
            .iter()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//!"))
            .count()
    };
    // The tools: from the first type to the end of the impl block.
    let start = lines
        .iter()
        .position(|l| l.starts_with("struct") || l.starts_with("#[derive"))
        .unwrap();
    let block = lines.iter().position(|l| l.starts_with("impl")).unwrap();
    let end = block + lines[block..].iter().position(|l| *l == "}").unwrap();
    let tools = code(&lines[start..=end]);
    let whole = code(&lines);
    let documented = |row: &str| -> usize {
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| {row}")))
            .unwrap_or_else(|| panic!("no row {row:?}"));
        line.split('|').nth(2).unwrap().trim().parse().unwrap()
    };
    assert_eq!(documented("the tools"), tools, "{path}");
    assert_eq!(documented("imports and"), whole - tools, "{path}");
    assert_eq!(documented("the whole program"), whole, "{path}");
}
