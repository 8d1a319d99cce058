//! The Rust MCP SDK's client, `rmcp` 3.11.0 (its streamable HTTP client
//! transport over reqwest), against one node started with `--page-size 2`
//! and through nginx round robin in front of a three-node cluster on one
//! Redis, also with `--page-size 2`: every page of tools, resources and
//! prompts (cursor by cursor and through rmcp's `list_all_*`), `echo` and
//! `add`, progress in order, cancellation through rmcp's `notify_cancelled`
//! (a `notifications/cancelled` POST in a session; in 2026-07-28 rmcp closes
//! the request's response stream instead), and elicitation answered by the
//! client's `ClientHandler`.
//!
//! rmcp 3.11 speaks both eras, so each target runs twice: the session era
//! (rmcp's default `serve`: `initialize`, answered with 2025-11-25) and
//! 2026-07-28 (`ClientLifecycleMode::Discover`: `server/discover`, then
//! stateless POSTs; an elicitation comes back as an `input_required` result
//! that rmcp's `call_tool` answers through the handler and retries).

mod cluster_support;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mcp_cluster_testkit::{GUARD, NodeProcess, node_binary, within};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, Implementation, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, ServerResult,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient, ServiceError,
    ServiceExt,
};
use serde_json::{Value, json};

/// The arguments every node gets: lists span several pages.
const NODE_ARGS: [&str; 2] = ["--page-size", "2"];

/// Pause between two looks at something the test waits for.
const POLL: Duration = Duration::from_millis(20);

/// The metric line prefix that counts finished requests (operations.md):
/// a request that ends without a response is `error_type="cancelled"`.
const OPERATIONS: &str = "mcp_server_operation_duration_seconds_count{";

/// What rmcp was told to negotiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    /// rmcp's default: `initialize` (ClientLifecycleMode::Initialize).
    Session,
    /// `server/discover` pinned to 2026-07-28 (ClientLifecycleMode::Discover).
    Stateless,
}

impl Era {
    /// The version the node must settle on.
    fn version(self) -> ProtocolVersion {
        match self {
            Era::Session => ProtocolVersion::V_2025_11_25,
            Era::Stateless => ProtocolVersion::V_2026_07_28,
        }
    }
}

/// One target and era under test: names every failure message.
#[derive(Debug, Clone)]
struct Run {
    /// The MCP endpoint rmcp connects to (a node, or nginx).
    url: String,
    /// Every node's base URL, for `/metrics`.
    nodes: Vec<String>,
    era: Era,
    /// "one node" or "three nodes behind nginx".
    target: &'static str,
}

impl Run {
    fn label(&self, check: &str) -> String {
        format!("[{:?} era, {}] {check}", self.era, self.target)
    }
}

/// The client side of every connection: records what the node sent and
/// answers each form elicitation with [`answer`] for every field asked.
#[derive(Debug, Clone, Default)]
struct Probe {
    /// Every `notifications/progress`, in the order rmcp delivered them.
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    /// Every `elicitation/create` params (session era) or elicitation
    /// input request (2026-07-28), as JSON, in order.
    asked: Arc<Mutex<Vec<Value>>>,
}

impl Probe {
    /// The progress notifications of `token` so far: (progress, total).
    fn progress_of(&self, token: &ProgressToken) -> Vec<(f64, Option<f64>)> {
        self.progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|p| &p.progress_token == token)
            .map(|p| (p.progress, p.total))
            .collect()
    }

    fn asked(&self) -> Vec<Value> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The value the handler gives an elicitation field.
fn answer(field: &str) -> Value {
    match field {
        "username" => json!("ferris"),
        "email" => json!("ferris@example.com"),
        "name" => json!("Ferris"),
        other => json!(format!("rmcp-{other}")),
    }
}

impl ClientHandler for Probe {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(params);
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let seen = serde_json::to_value(&request).unwrap_or_default();
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(seen.clone());
        if !matches!(request, ElicitRequestParams::FormElicitationParams { .. }) {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        let content: serde_json::Map<String, Value> = seen["requestedSchema"]["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(field, _)| (field.clone(), answer(field)))
            .collect();
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content)))
    }

    fn get_info(&self) -> ClientConfig {
        // `elicitation: {}`: form mode. The protocol version stays rmcp's
        // default (its newest): in the session era that is what an rmcp
        // client sends in `initialize`.
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(ElicitationCapability::new());
        ClientConfig::new(capabilities, Implementation::new("mcp-e2e-rmcp", "0"))
    }
}

type Client = RunningService<RoleClient, Probe>;

/// Connects rmcp to `run.url` in `run.era` (or with `lifecycle` when given)
/// and checks the version it settled on.
async fn connect(run: &Run, lifecycle: Option<ClientLifecycleMode>) -> (Client, Probe) {
    let probe = Probe::default();
    let transport = StreamableHttpClientTransport::from_uri(run.url.as_str());
    let lifecycle = lifecycle.unwrap_or(match run.era {
        Era::Session => ClientLifecycleMode::Initialize,
        Era::Stateless => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    });
    let started = match lifecycle {
        ClientLifecycleMode::Initialize => {
            within(&run.label("initialize"), probe.clone().serve(transport)).await
        }
        other => {
            within(
                &run.label("server/discover"),
                probe.clone().serve_with_lifecycle(transport, other),
            )
            .await
        }
    };
    let client = started.unwrap_or_else(|err| panic!("{}: {err:?}", run.label("connect")));
    let info = client
        .peer_info()
        .expect("a connected client knows its server");
    assert_eq!(
        info.protocol_version,
        run.era.version(),
        "{}: {info:?}",
        run.label("negotiated version")
    );
    (client, probe)
}

/// A tool call's params.
fn call(name: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("tool arguments are an object: {arguments}");
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

/// `tools/call` through rmcp's high-level `call_tool` (which drives
/// `input_required` rounds in 2026-07-28); the result as JSON.
async fn call_tool(run: &Run, client: &Client, name: &'static str, arguments: Value) -> Value {
    let what = run.label(&format!("tools/call {name}"));
    let result: CallToolResult = within(&what, client.call_tool(call(name, arguments)))
        .await
        .unwrap_or_else(|err| panic!("{what}: {err:?}"));
    serde_json::to_value(&result).unwrap()
}

/// The first text content of a tool result.
fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

/// One list walked cursor by cursor: the keys of its items in order and how
/// many pages it took. `page` returns one page's items (as JSON) and its
/// `nextCursor`.
async fn walk<F, Fut>(what: &str, key: &str, mut page: F) -> (Vec<String>, usize)
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<Value>, Option<String>), ServiceError>>,
{
    let mut keys = Vec::new();
    let mut cursors = Vec::new();
    let mut cursor: Option<String> = None;
    for pages in 1..=100 {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (items, next) = within(what, page(params))
            .await
            .unwrap_or_else(|err| panic!("{what}, page {pages} (cursor {cursor:?}): {err:?}"));
        for item in &items {
            let k = item[key]
                .as_str()
                .unwrap_or_else(|| panic!("{what}: an item without {key}: {item}"));
            keys.push(k.to_owned());
        }
        match next {
            None => return (keys, pages),
            Some(next) => {
                assert!(
                    !cursors.contains(&next),
                    "{what}: cursor {next:?} came twice: {cursors:?}"
                );
                cursors.push(next.clone());
                cursor = Some(next);
            }
        }
    }
    panic!("{what}: still a nextCursor after 100 pages: {keys:?}");
}

/// Items as JSON.
fn as_json<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items
        .iter()
        .map(|item| serde_json::to_value(item).unwrap())
        .collect()
}

/// No duplicates, every expected key, more than one page, and rmcp's own
/// every-page walk agrees.
fn check_list(what: &str, (keys, pages): &(Vec<String>, usize), expected: &[&str], all: &[Value]) {
    let unique: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(unique.len(), keys.len(), "{what}: duplicates in {keys:?}");
    for name in expected {
        assert!(
            unique.contains(name),
            "{what}: {name} missing from {keys:?}"
        );
    }
    assert!(
        *pages > 1,
        "{what}: one page only with --page-size 2: {keys:?}"
    );
    let key = if what.contains("resources") {
        "uri"
    } else {
        "name"
    };
    let all: Vec<&str> = all.iter().filter_map(|item| item[key].as_str()).collect();
    assert_eq!(
        all,
        keys.iter().map(String::as_str).collect::<Vec<_>>(),
        "{what}: rmcp's list_all differs from the cursor walk"
    );
}

/// Check 1: every page of tools, resources and prompts.
async fn lists(run: &Run, client: &Client) {
    let what = run.label("tools/list");
    let tools = walk(&what, "name", |params| async move {
        client
            .list_tools(params)
            .await
            .map(|page| (as_json(&page.tools), page.next_cursor))
    })
    .await;
    let all = within(&what, client.list_all_tools()).await.unwrap();
    check_list(
        &what,
        &tools,
        &["echo", "add", "long_running_operation"],
        &as_json(&all),
    );

    let what = run.label("resources/list");
    let resources = walk(&what, "uri", |params| async move {
        client
            .list_resources(params)
            .await
            .map(|page| (as_json(&page.resources), page.next_cursor))
    })
    .await;
    let all = within(&what, client.list_all_resources()).await.unwrap();
    check_list(&what, &resources, &["test://static-text"], &as_json(&all));

    let what = run.label("prompts/list");
    let prompts = walk(&what, "name", |params| async move {
        client
            .list_prompts(params)
            .await
            .map(|page| (as_json(&page.prompts), page.next_cursor))
    })
    .await;
    let all = within(&what, client.list_all_prompts()).await.unwrap();
    check_list(&what, &prompts, &["test_simple_prompt"], &as_json(&all));
}

/// Check 2: `echo` gives text, `add` structured content.
async fn calls(run: &Run, client: &Client) {
    let echo = call_tool(run, client, "echo", json!({"message": "hi"})).await;
    assert_eq!(text(&echo), "Echo: hi", "{}: {echo}", run.label("echo"));
    assert_ne!(echo["isError"], true, "{}: {echo}", run.label("echo"));

    let add = call_tool(run, client, "add", json!({"a": 2, "b": 3})).await;
    let structured = add["structuredContent"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: no structuredContent: {add}", run.label("add")));
    assert_eq!(
        (
            structured.len(),
            structured.get("sum").and_then(Value::as_f64)
        ),
        (1, Some(5.0)),
        "{}: structuredContent is not {{\"sum\": 5}}: {add}",
        run.label("add")
    );
    assert_ne!(add["isError"], true, "{}: {add}", run.label("add"));
}

/// Sends `tools/call` through rmcp's cancellable request API (rmcp puts a
/// progress token on every request); the handle knows the token and id.
async fn start_call(
    run: &Run,
    client: &Client,
    params: CallToolRequestParams,
) -> rmcp::service::RequestHandle<RoleClient> {
    let what = run.label(&format!("send tools/call {}", params.name));
    within(
        &what,
        client.send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        ),
    )
    .await
    .unwrap_or_else(|err| panic!("{what}: {err:?}"))
}

/// The result of a request started with [`start_call`].
async fn finish_call(what: &str, handle: rmcp::service::RequestHandle<RoleClient>) -> Value {
    match within(what, handle.await_response()).await {
        Ok(ServerResult::CallToolResult(result)) => serde_json::to_value(&result).unwrap(),
        other => panic!("{what}: expected a tool result, got {other:?}"),
    }
}

/// Check 3: progress reaches the client's handler in order, all of it
/// before the result.
async fn progress(run: &Run, client: &Client, probe: &Probe) {
    let what = run.label("long_running_operation with progress");
    let handle = start_call(
        run,
        client,
        call(
            "long_running_operation",
            json!({"duration_ms": 500, "steps": 5}),
        ),
    )
    .await;
    let token = handle.progress_token.clone();
    let result = finish_call(&what, handle).await;
    assert!(
        text(&result).starts_with("Long running operation completed: 5 steps"),
        "{what}: {result}"
    );
    let seen = probe.progress_of(&token);
    let expected: Vec<_> = (1..=5).map(|step| (f64::from(step), Some(5.0))).collect();
    assert_eq!(
        seen, expected,
        "{what}: (progress, total) in the order the handler got them, before the result"
    );

    let what = run.label("test_tool_with_progress");
    let handle = start_call(run, client, call("test_tool_with_progress", json!({}))).await;
    let token = handle.progress_token.clone();
    let result = finish_call(&what, handle).await;
    assert_eq!(
        text(&result),
        "Tool with progress executed successfully",
        "{what}: {result}"
    );
    assert_eq!(
        probe.progress_of(&token),
        vec![
            (0.0, Some(100.0)),
            (50.0, Some(100.0)),
            (100.0, Some(100.0))
        ],
        "{what}: (progress, total) in order"
    );
}

/// How many `long_running_operation` calls the nodes recorded as ended
/// without a response (cancelled), summed over every node.
async fn cancelled_calls(nodes: &[String]) -> f64 {
    let mut total = 0.0;
    for base in nodes {
        let response = within("GET /metrics", reqwest::get(format!("{base}/metrics")))
            .await
            .unwrap_or_else(|err| panic!("GET {base}/metrics: {err}"));
        let body = within("the /metrics body", response.text()).await.unwrap();
        total += body
            .lines()
            .filter(|line| {
                line.starts_with(OPERATIONS)
                    && line.contains(r#"error_type="cancelled""#)
                    && line.contains(r#"gen_ai_tool_name="long_running_operation""#)
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

/// Check 4: a running call cancelled with rmcp's `notify_cancelled` ends as
/// cancelled on the client, without a result; the node records it as
/// cancelled and keeps serving.
async fn cancellation(run: &Run, client: &Client, probe: &Probe) {
    let what = run.label("cancel long_running_operation");
    let before = cancelled_calls(&run.nodes).await;
    let handle = start_call(
        run,
        client,
        call(
            "long_running_operation",
            json!({"duration_ms": 60_000, "steps": 240}),
        ),
    )
    .await;
    let (id, token) = (handle.id.clone(), handle.progress_token.clone());
    let pending = tokio::spawn(handle.await_response());
    within(&format!("{what}: first progress"), async {
        while probe.progress_of(&token).is_empty() {
            tokio::time::sleep(POLL).await;
        }
    })
    .await;

    // rmcp's cancellation: in a session a POSTed notifications/cancelled;
    // in 2026-07-28 it closes the request's response stream instead.
    within(
        &what,
        client.notify_cancelled(CancelledNotificationParam::new(
            Some(id),
            Some("the e2e test cancels".to_owned()),
        )),
    )
    .await
    .unwrap_or_else(|err| panic!("{what}: {err:?}"));
    match within(&what, pending).await.unwrap() {
        Err(ServiceError::Cancelled { .. }) => {}
        other => panic!("{what}: the call should end as cancelled, got {other:?}"),
    }

    // The node stopped the handler without answering: it counts the
    // request as cancelled (in 2026-07-28 once its next progress write
    // finds the stream gone). A completed call would not be counted here
    // before the 60 s it runs.
    let counted = tokio::time::timeout(GUARD, async {
        loop {
            let now = cancelled_calls(&run.nodes).await;
            if now > before {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        counted.is_ok(),
        "{what}: no node counted the call as cancelled (error_type=\"cancelled\" of \
         long_running_operation stayed at {before}); progress seen: {:?}",
        probe.progress_of(&token)
    );

    let echo = call_tool(run, client, "echo", json!({"message": "still here"})).await;
    assert_eq!(
        text(&echo),
        "Echo: still here",
        "{what}: the next call: {echo}"
    );
}

/// Check 5: the node's elicitation is answered by the handler, and the
/// tools' results carry the answers.
async fn elicitation(run: &Run, client: &Client, probe: &Probe) {
    let what = run.label("test_input_required_result_elicitation");
    let result = call_tool(
        run,
        client,
        "test_input_required_result_elicitation",
        json!({}),
    )
    .await;
    assert_eq!(
        text(&result),
        "Hello, Ferris!",
        "{what}: {result}; handler was asked {:?}",
        probe.asked()
    );

    let what = run.label("test_elicitation");
    let result = call_tool(
        run,
        client,
        "test_elicitation",
        json!({"message": "Who are you?"}),
    )
    .await;
    let said = text(&result);
    assert!(
        said.starts_with("User response: action=accept")
            && said.contains(r#""username":"ferris""#)
            && said.contains(r#""email":"ferris@example.com""#),
        "{what}: {result}; handler was asked {:?}",
        probe.asked()
    );
    let asked = probe.asked();
    assert!(
        asked.iter().any(|a| a["message"] == "What is your name?")
            && asked.iter().any(|a| a["message"] == "Who are you?"),
        "{what}: the handler should have seen both questions: {asked:?}"
    );
}

/// Every check, one after the other, on one connection.
async fn run_checks(run: Run) {
    let (client, probe) = connect(&run, None).await;
    lists(&run, &client).await;
    calls(&run, &client).await;
    progress(&run, &client, &probe).await;
    cancellation(&run, &client, &probe).await;
    elicitation(&run, &client, &probe).await;
    if run.era == Era::Stateless {
        // rmcp's probing mode lands in 2026-07-28 too.
        let (auto, _) = connect(
            &run,
            Some(ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            }),
        )
        .await;
        let echo = call_tool(&run, &auto, "echo", json!({"message": "auto"})).await;
        assert_eq!(text(&echo), "Echo: auto", "{}: {echo}", run.label("Auto"));
        within(&run.label("close"), auto.cancel()).await.unwrap();
    }
    within(&run.label("close"), client.cancel()).await.unwrap();
}

/// One `mcp-node` without Redis.
fn one_node() -> NodeProcess {
    NodeProcess::spawn(
        &node_binary(),
        &[NODE_ARGS[0], NODE_ARGS[1], "--log", "warn"],
    )
    .unwrap_or_else(|err| panic!("mcp-node did not start: {err:#}"))
}

fn node_run(node: &NodeProcess, era: Era) -> Run {
    let url = node.url().to_owned();
    let base = url.trim_end_matches("/mcp").to_owned();
    Run {
        url,
        nodes: vec![base],
        era,
        target: "one node",
    }
}

fn cluster_run(cluster: &mcp_cluster_testkit::Cluster, era: Era) -> Run {
    Run {
        url: cluster.lb_url(),
        nodes: (0..cluster.len())
            .map(|i| format!("http://{}", cluster.node_addr(i)))
            .collect(),
        era,
        target: "three nodes behind nginx",
    }
}

#[tokio::test]
async fn session_era_on_one_node() {
    let node = one_node();
    run_checks(node_run(&node, Era::Session)).await;
}

#[tokio::test]
async fn session_era_through_nginx_on_three_nodes() {
    let cluster = cluster_support::start(3, &NODE_ARGS);
    run_checks(cluster_run(&cluster, Era::Session)).await;
}

#[tokio::test]
async fn stateless_era_on_one_node() {
    let node = one_node();
    run_checks(node_run(&node, Era::Stateless)).await;
}

#[tokio::test]
async fn stateless_era_through_nginx_on_three_nodes() {
    let cluster = cluster_support::start(3, &NODE_ARGS);
    run_checks(cluster_run(&cluster, Era::Stateless)).await;
}
