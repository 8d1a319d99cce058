//! A hosted server's question during a 2026-07-28 call, in a cluster: the
//! call's child keeps waiting for the answer (it is never run again), the
//! call is answered `input_required`, and the client's retry, on any node,
//! brings the answer to that child and its outcome back. The hosted server
//! is `tests/relay/hostile.py elicit`, whose tool `act` says how many times
//! it was called.

mod cluster_support;
mod relay_support;
mod stateless_support;

use std::time::Duration;

use relay_support::{Scratch, config_file};
use serde_json::{Value, json};
use stateless_support::{all_caps, tool_call};

/// A configuration file hosting `hostile.py elicit`, with `runtime`
/// settings, in a directory removed with the returned guard.
fn hosting_elicit(runtime: &str) -> (String, Scratch) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("relay/hostile.py");
    let argv =
        serde_json::to_string(&["python3", &script.display().to_string(), "elicit"]).unwrap();
    config_file(
        "mcp-relay-rounds",
        &format!("[runtime]\n{runtime}\n\n[[upstreams]]\nname = \"elicit\"\ncommand = {argv}\n"),
    )
}

/// `n` nodes on one Redis, behind nginx, with the configuration file
/// `config`.
async fn nodes(n: usize, config: String) -> mcp_cluster_testkit::Cluster {
    tokio::task::spawn_blocking(move || cluster_support::start(n, &["--config", &config]))
        .await
        .unwrap()
}

/// `act` asking `questions` questions, with `extra` params.
fn act(id: u64, questions: u64, extra: Value) -> Value {
    act_with(id, json!({"questions": questions}), extra)
}

/// `act` with these `arguments` and `extra` params.
fn act_with(id: u64, arguments: Value, extra: Value) -> Value {
    tool_call(id, "act", arguments, extra, all_caps())
}

/// The response to `body` on `url`.
async fn post(url: &str, body: &Value) -> Value {
    tokio::time::timeout(
        Duration::from_secs(30),
        stateless_support::call(url, body, &[]),
    )
    .await
    .expect("answered within 30 s")
    .response
}

/// The one question of an `input_required` result: its key, its params'
/// message, and the state.
fn question(response: &Value) -> (String, String, String) {
    let result = &response["result"];
    assert_eq!(result["resultType"], "input_required", "{response}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{response}");
    let (key, asked) = requests.iter().next().unwrap();
    assert_eq!(asked["method"], "elicitation/create", "{response}");
    (
        key.clone(),
        asked["params"]["message"].as_str().unwrap().to_owned(),
        result["requestState"].as_str().unwrap().to_owned(),
    )
}

fn answered(key: &str, name: &str, state: &str) -> Value {
    json!({
        "inputResponses": {key: {"action": "accept", "content": {"name": name}}},
        "requestState": state,
    })
}

#[tokio::test]
async fn each_round_s_retry_on_another_node_reaches_the_same_waiting_child() {
    let (config, _dir) = hosting_elicit("");
    let cluster = nodes(3, config).await;
    let first = post(&cluster.node_url(0), &act(1, 2, json!({}))).await;
    let (key, message, state) = question(&first);
    assert_eq!(message, "question 1");
    let waiting = |i: usize| {
        let base = cluster.node_url(i).trim_end_matches("/mcp").to_owned();
        async move { mcp_cluster_testkit::metric(&base, "mcp_input_rounds_waiting").await }
    };
    assert_eq!(waiting(0).await, 1.0, "the call waits on node 0");
    assert_eq!(waiting(1).await, 0.0);

    // The answer to the first question on another node: the child, which
    // runs on node 0, asks its second.
    let second = post(
        &cluster.node_url(1),
        &act(2, 2, answered(&key, "ada", &state)),
    )
    .await;
    let (key2, message, state2) = question(&second);
    assert_eq!(message, "question 2", "{second}");
    assert_ne!(key2, key);

    // A state is accepted once.
    let replayed = post(
        &cluster.node_url(2),
        &act(3, 2, answered(&key, "ada", &state)),
    )
    .await;
    assert_eq!(
        replayed["error"]["data"]["reason"], "replayed",
        "{replayed}"
    );

    // The last answer on a third node: the call's outcome.
    let done = post(
        &cluster.node_url(2),
        &act(4, 2, answered(&key2, "bob", &state2)),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let text = done["result"]["content"][0]["text"].as_str().unwrap();
    let got: Value = serde_json::from_str(text).unwrap();
    assert_eq!(got["calls"], 1, "the tool ran once, on one child: {got}");
    assert_eq!(got["answers"][0]["content"]["name"], "ada", "{got}");
    assert_eq!(got["answers"][1]["content"]["name"], "bob", "{got}");
    assert!(
        done["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object(),
        "{done}"
    );
    assert_eq!(waiting(0).await, 0.0, "the call ended");

    // A retry without the answer is asked again at once, and the run
    // still waits for it.
    let first = post(&cluster.node_url(0), &act(5, 1, json!({}))).await;
    let (key, _, state) = question(&first);
    let unanswered = post(
        &cluster.node_url(1),
        &act(6, 1, json!({"inputResponses": {}, "requestState": state})),
    )
    .await;
    let (again, message, state) = question(&unanswered);
    assert_eq!(
        (again.as_str(), message.as_str()),
        (key.as_str(), "question 1")
    );
    let done = post(
        &cluster.node_url(1),
        &act(7, 1, answered(&key, "cy", &state)),
    )
    .await;
    let got: Value =
        serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(got["calls"], 2, "{got}");
    assert_eq!(got["answers"][0]["content"]["name"], "cy", "{got}");
}

#[tokio::test]
async fn a_retry_whose_run_s_node_died_is_answered_with_an_error_not_a_wait() {
    let (config, _dir) = hosting_elicit("");
    let mut cluster = nodes(2, config).await;
    let first = post(&cluster.node_url(0), &act(1, 1, json!({}))).await;
    let (key, _, state) = question(&first);
    cluster.kill_node(0);
    // The retry is answered once the dead node's heartbeat lapses (6 s),
    // or at the latest its run's lease (10 s): not waited on for ever.
    // (A waiting retry is answered as a stream.)
    let body = act(2, 1, answered(&key, "ada", &state));
    let response = stateless_support::send(&cluster.node_url(1), &body, &[]).await;
    let mut messages = stateless_support::Messages::new(response);
    let retried = messages
        .next_within(Duration::from_secs(30))
        .await
        .expect("the retry was answered within 30 s")
        .expect("an answer before the stream ended");
    assert_eq!(retried["error"]["code"], -32603, "{retried}");
    let message = retried["error"]["message"].as_str().unwrap();
    assert!(message.contains("stopped"), "{retried}");
}

#[tokio::test]
async fn a_question_nobody_answers_ends_with_the_ask_timeout_and_frees_the_child() {
    let (config, _dir) = hosting_elicit("ask_timeout_secs = 2");
    let cluster = nodes(1, config).await;
    let url = cluster.node_url(0);
    let first = post(&url, &act(1, 1, json!({}))).await;
    let (key, _, state) = question(&first);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The child was told its question failed and answered its call: a late
    // retry gets that outcome.
    let late = post(&url, &act(2, 1, answered(&key, "late", &state))).await;
    let got: Value = serde_json::from_str(late["result"]["content"][0]["text"].as_str().unwrap())
        .unwrap_or_else(|_| panic!("{late}"));
    assert!(got["answers"][0]["code"].is_i64(), "{got}");
    // The child serves the next call.
    let next = post(&url, &act(3, 1, json!({}))).await;
    let (key, _, state) = question(&next);
    let done = post(&url, &act(4, 1, answered(&key, "next", &state))).await;
    let got: Value =
        serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(got["calls"], 2, "one child served both calls: {got}");
}

#[tokio::test]
async fn questions_a_child_asks_together_go_out_in_one_round() {
    let (config, _dir) = hosting_elicit("");
    let cluster = nodes(2, config).await;
    let body = |id, extra| act_with(id, json!({"questions": 3, "together": true}), extra);
    let first = post(&cluster.node_url(0), &body(1, json!({}))).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 3, "all three in one round: {first}");
    let answers: serde_json::Map<String, Value> = requests
        .iter()
        .map(|(key, asked)| {
            let name = asked["params"]["message"]
                .as_str()
                .unwrap()
                .replace(' ', "-");
            (
                key.clone(),
                json!({"action": "accept", "content": {"name": name}}),
            )
        })
        .collect();
    let state = result["requestState"].as_str().unwrap();
    let done = post(
        &cluster.node_url(1),
        &body(2, json!({"inputResponses": answers, "requestState": state})),
    )
    .await;
    let got: Value = serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap())
        .unwrap_or_else(|_| panic!("{done}"));
    assert_eq!(got["calls"], 1, "{got}");
    let names: Vec<&str> = got["answers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["content"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["question-1", "question-2", "question-3"], "{got}");
}

#[tokio::test]
async fn a_child_that_speaks_2026_07_28_gets_requests_as_they_come_and_is_shared() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("relay/hostile.py");
    let argv =
        serde_json::to_string(&["python3", &script.display().to_string(), "modern"]).unwrap();
    let (config, _dir) = config_file(
        "mcp-relay-modern",
        &format!("[[upstreams]]\nname = \"modern\"\ncommand = {argv}\nstateless = true\n"),
    );
    let cluster = nodes(2, config).await;
    // server/discover: the child's own.
    let discovered = post(
        &cluster.node_url(0),
        &stateless_support::request(1, "server/discover", json!({}), json!({})),
    )
    .await;
    assert_eq!(
        discovered["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "hostile-modern",
        "{discovered}"
    );
    // The revisions it names itself, of those the node speaks.
    assert_eq!(
        discovered["result"]["supportedVersions"],
        json!(["2026-07-28"]),
        "{discovered}"
    );
    // Its own input round, its own state, passed through both ways; the
    // retry on the other node.
    let act = |id, extra, caps| tool_call(id, "act", json!({}), extra, caps);
    let first = post(&cluster.node_url(0), &act(2, json!({}), all_caps())).await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    assert_eq!(
        result["inputRequests"]["name"]["method"], "elicitation/create",
        "{first}"
    );
    let state = result["requestState"].as_str().unwrap();
    assert!(
        state.starts_with("child-state-"),
        "the child's own: {first}"
    );
    let answer = json!({"name": {"action": "accept", "content": {"name": "ada"}}});
    let done = post(
        &cluster.node_url(1),
        &act(
            3,
            json!({"inputResponses": answer, "requestState": state}),
            all_caps(),
        ),
    )
    .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    let got: Value =
        serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(got["state"], state, "{got}");
    assert_eq!(got["answer"]["content"]["name"], "ada", "{got}");
    assert!(got["caps"]["elicitation"].is_object(), "{got}");
    // Requests of other client capabilities share one child.
    let mut pids = Vec::new();
    for (id, caps) in [(4, json!({})), (5, all_caps()), (6, json!({"roots": {}}))] {
        let done = post(
            &cluster.node_url(0),
            &act(
                id,
                json!({"inputResponses": answer, "requestState": "given"}),
                caps.clone(),
            ),
        )
        .await;
        let got: Value =
            serde_json::from_str(done["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(got["caps"], caps, "each request's own capabilities: {got}");
        pids.push(got["pid"].clone());
    }
    assert!(pids.windows(2).all(|w| w[0] == w[1]), "one child: {pids:?}");
}

#[tokio::test]
async fn a_retry_whose_client_goes_away_cancels_the_waiting_call() {
    // Keep-alives every second on the retry's stream: a node learns that
    // a waiting stream's client left when it next writes.
    let (config, _dir) = hosting_elicit("sse_keep_alive_secs = 1");
    let cluster = nodes(2, config).await;
    let body = |id, extra| act_with(id, json!({"questions": 1, "hold": true}), extra);
    let first = post(&cluster.node_url(0), &body(1, json!({}))).await;
    let (key, _, state) = question(&first);
    // The retry on node 1 gives the answer; the child then works on (it
    // never answers). The retry's answer is a stream from the start of
    // its wait; its client reads the headers, then goes away.
    let retry = body(2, answered(&key, "ada", &state));
    let response = stateless_support::send(&cluster.node_url(1), &retry, &[]).await;
    assert_eq!(response.status(), 200);
    assert!(
        response.headers().get("content-type").is_some_and(|v| v
            .to_str()
            .unwrap_or_default()
            .starts_with("text/event-stream")),
        "{:?}",
        response.headers()
    );
    drop(response);
    // The call ends on node 0 (cancelled), rather than running on.
    let base = cluster.node_url(0).trim_end_matches("/mcp").to_owned();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while mcp_cluster_testkit::metric(&base, "mcp_input_rounds_waiting").await > 0.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the call still runs after its client went away"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_child_s_progress_and_logs_after_its_question_reach_the_retry() {
    let (config, _dir) = hosting_elicit("");
    let cluster = nodes(2, config).await;
    let arguments = json!({"questions": 1, "progress_after": 3});
    let mut first = act_with(1, arguments.clone(), json!({}));
    first["params"]["_meta"]["progressToken"] = json!("first");
    first["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let first = post(&cluster.node_url(0), &first).await;
    let (key, _, state) = question(&first);

    // The retry, on the other node, with a token of its own: the child's
    // progress once answered reaches it (the newest at each look, the
    // last one always), and its log lines, then the outcome.
    let mut retry = act_with(2, arguments, answered(&key, "ada", &state));
    retry["params"]["_meta"]["progressToken"] = json!("retry");
    retry["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let answer = tokio::time::timeout(
        Duration::from_secs(30),
        stateless_support::call(&cluster.node_url(1), &retry, &[]),
    )
    .await
    .expect("answered within 30 s");
    let progress: Vec<&Value> = answer
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(
        progress
            .iter()
            .all(|n| n["params"]["progressToken"] == "retry"
                && n["params"]["total"].as_f64() == Some(3.0)),
        "{progress:?}"
    );
    let values: Vec<f64> = progress
        .iter()
        .map(|n| n["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    let last = progress
        .last()
        .unwrap_or_else(|| panic!("no progress: {answer:?}"));
    assert_eq!(last["params"]["progress"], 3.0, "{progress:?}");
    assert_eq!(last["params"]["message"], "step 3", "{progress:?}");
    // Its log lines too, every one.
    let logs: Vec<&Value> = answer
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/message")
        .map(|n| &n["params"]["data"])
        .collect();
    assert_eq!(logs, [&json!("step 1"), &json!("step 2"), &json!("step 3")]);
    let got: Value = serde_json::from_str(stateless_support::text(&answer.response))
        .unwrap_or_else(|_| panic!("{answer:?}"));
    assert_eq!(got["answers"][0]["content"]["name"], "ada", "{got}");
}
