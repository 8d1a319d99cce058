//! The 2026-07-28 (stateless) era on one node, from outside: discovery and
//! calls without a session beside the session era on the same endpoint, the
//! wire errors with their HTTP status and request id, input-required round
//! trips and the sealed request state (tampered, replayed, expired, another
//! request's), `subscriptions/listen`, log levels per request, and a closed
//! response stream cancelling its request.

mod stateless_support;

use std::time::Duration;

use mcp_cluster_testkit::{NodeProcess, node_binary, within};
use serde_json::{Value, json};
use stateless_support::*;

fn node(args: &[&str]) -> NodeProcess {
    NodeProcess::spawn(&node_binary(), args).expect("node started")
}

fn base(node: &NodeProcess) -> String {
    node.url().trim_end_matches("/mcp").to_owned()
}

#[tokio::test]
async fn discovery_and_calls_need_no_session_and_initialize_still_opens_one() {
    let node = node(&[]);
    let url = node.url();

    let discover = call(
        url,
        &request(1, "server/discover", json!({}), json!({})),
        &[],
    )
    .await;
    assert_eq!(discover.status, 200, "{discover:?}");
    assert!(!discover.session_header, "no session in 2026-07-28");
    let result = &discover.response["result"];
    assert_eq!(result["resultType"], "complete", "{result}");
    let versions: Vec<&str> = result["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        versions,
        [
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05"
        ]
    );
    assert!(result["capabilities"]["tools"].is_object(), "{result}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-node"
    );
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");
    assert_eq!(result["cacheScope"], "public");

    let echo = call(
        url,
        &tool_call(2, "echo", json!({"message": "hi"}), json!({}), json!({})),
        &[],
    )
    .await;
    assert_eq!(text(&echo.response), "Echo: hi");
    assert_eq!(echo.response["result"]["resultType"], "complete");
    assert!(!echo.session_header);

    // Lists carry caching hints; resources/read is private.
    let list = call(url, &request(3, "tools/list", json!({}), json!({})), &[]).await;
    assert!(list.response["result"]["tools"].is_array());
    assert!(list.response["result"]["ttlMs"].is_u64());
    let read = call(
        url,
        &request(
            4,
            "resources/read",
            json!({"uri": "test://static-text"}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert_eq!(read.response["result"]["cacheScope"], "private", "{read:?}");

    // The session era on the same endpoint: initialize opens a session.
    let mut client = mcp_cluster_client::Client::new(url, "2025-11-25");
    within("initialize", client.initialize(json!({})))
        .await
        .expect("initialize");
    assert!(client.session_id().is_some());
    let (response, _) = within(
        "session call",
        client.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "old"}}),
        ),
    )
    .await
    .expect("session-era call");
    let result = &response["result"];
    assert_eq!(result["content"][0]["text"], "Echo: old");
    assert!(
        result.get("resultType").is_none(),
        "session-era results keep their shape"
    );
}

/// One refused request: what it sends, the status and code it gets.
struct Refused {
    what: &'static str,
    body: Value,
    overrides: Vec<(&'static str, Option<&'static str>)>,
    status: u16,
    code: i64,
}

#[tokio::test]
async fn every_wire_error_has_its_status_code_and_the_request_id() {
    let node = node(&[]);
    let url = node.url();
    let discover = |params: Value| json!({"jsonrpc": "2.0", "id": 7, "method": "server/discover", "params": params});
    let no_version = json!({"io.modelcontextprotocol/clientCapabilities": {}});
    let old_version = json!({
        "io.modelcontextprotocol/protocolVersion": "1999-01-01",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let cases = [
        Refused {
            what: "no _meta",
            body: discover(json!({})),
            overrides: vec![],
            status: 400,
            code: -32602,
        },
        Refused {
            what: "no protocol version in _meta",
            body: discover(json!({"_meta": no_version})),
            overrides: vec![],
            status: 400,
            code: -32602,
        },
        Refused {
            what: "header and _meta disagree",
            body: discover(json!({"_meta": old_version.clone()})),
            overrides: vec![],
            status: 400,
            code: -32020,
        },
        Refused {
            what: "a version not served",
            body: discover(json!({"_meta": old_version})),
            overrides: vec![("MCP-Protocol-Version", Some("1999-01-01"))],
            status: 400,
            code: -32022,
        },
        Refused {
            what: "no Mcp-Method",
            body: request(7, "tools/list", json!({}), json!({})),
            overrides: vec![("Mcp-Method", None)],
            status: 400,
            code: -32020,
        },
        Refused {
            what: "Mcp-Name of another tool",
            body: tool_call(7, "echo", json!({"message": "x"}), json!({}), json!({})),
            overrides: vec![("Mcp-Name", Some("add"))],
            status: 400,
            code: -32020,
        },
        Refused {
            what: "a mirrored argument without its Mcp-Param header",
            body: tool_call(
                7,
                "test_header_param",
                json!({"region": "eu"}),
                json!({}),
                json!({}),
            ),
            overrides: vec![],
            status: 400,
            code: -32020,
        },
        Refused {
            what: "initialize in the stateless era",
            body: request(7, "initialize", json!({}), json!({})),
            overrides: vec![],
            status: 404,
            code: -32601,
        },
        Refused {
            what: "ping (removed)",
            body: request(7, "ping", json!({}), json!({})),
            overrides: vec![],
            status: 404,
            code: -32601,
        },
        Refused {
            what: "resources/subscribe (removed)",
            body: request(
                7,
                "resources/subscribe",
                json!({"uri": "test://static-text"}),
                json!({}),
            ),
            overrides: vec![],
            status: 404,
            code: -32601,
        },
        Refused {
            what: "a capability the request lacks",
            body: tool_call(
                7,
                "test_missing_capability",
                json!({}),
                json!({}),
                json!({}),
            ),
            overrides: vec![],
            status: 400,
            code: -32021,
        },
    ];
    for case in cases {
        let answer = call(url, &case.body, &case.overrides).await;
        assert_eq!(
            (answer.status, answer.response["error"]["code"].as_i64()),
            (case.status, Some(case.code)),
            "{}: {answer:?}",
            case.what
        );
        assert_eq!(answer.response["id"], 7, "{}: the id is echoed", case.what);
    }

    let unsupported = call(
        url,
        &discover(json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "1999-01-01",
            "io.modelcontextprotocol/clientCapabilities": {}}})),
        &[("MCP-Protocol-Version", Some("1999-01-01"))],
    )
    .await;
    assert_eq!(
        unsupported.response["error"]["data"]["requested"],
        "1999-01-01"
    );
    assert_eq!(
        unsupported.response["error"]["data"]["supported"][0],
        "2026-07-28"
    );
    let missing = call(
        url,
        &tool_call(
            8,
            "test_missing_capability",
            json!({}),
            json!({}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert_eq!(
        missing.response["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    // The mirrored argument with its header passes.
    let region = call(
        url,
        &tool_call(
            9,
            "test_header_param",
            json!({"region": "eu"}),
            json!({}),
            json!({}),
        ),
        &[("Mcp-Param-Region", Some("eu"))],
    )
    .await;
    assert_eq!(text(&region.response), "Region: eu");
    // Resource not found: -32602 with the URI (2026-07-28).
    let gone = call(
        url,
        &request(
            10,
            "resources/read",
            json!({"uri": "test://nothing"}),
            json!({}),
        ),
        &[],
    )
    .await;
    assert_eq!(gone.response["error"]["code"], -32602, "{gone:?}");
    assert_eq!(gone.response["error"]["data"]["uri"], "test://nothing");
}

#[tokio::test]
async fn input_required_round_trips_and_the_sealed_state_refuses_misuse() {
    let dir = std::env::temp_dir().join(format!("stateless-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.toml");
    std::fs::write(&config, "[runtime]\nrequest_state_ttl_secs = 2\n").unwrap();
    let node = node(&["--config", config.to_str().unwrap()]);
    let url = node.url();
    let tool = "test_input_required_result_multi_round";

    let first = call(
        url,
        &tool_call(1, tool, json!({}), json!({}), all_caps()),
        &[],
    )
    .await;
    let result = &first.response["result"];
    assert_eq!(result["resultType"], "input_required", "{first:?}");
    assert_eq!(
        result["inputRequests"]["step1"]["method"],
        "elicitation/create"
    );
    let state1 = result["requestState"].as_str().unwrap().to_owned();
    assert!(
        result.get("ttlMs").is_none(),
        "interim results are not cacheable"
    );

    let retry = |id: u64, answers: Value, state: &str| {
        tool_call(
            id,
            tool,
            json!({}),
            json!({"inputResponses": answers, "requestState": state}),
            all_caps(),
        )
    };
    let refused = |answer: &Answer, reason: &str| {
        assert_eq!(answer.response["error"]["code"], -32602, "{answer:?}");
        assert_eq!(
            answer.response["error"]["data"]["reason"], reason,
            "{answer:?}"
        );
    };

    // A changed state, and a state presented with other params.
    // One character in the middle of the sealed part: a different byte
    // (the last character may carry only padding bits).
    let mut chars: Vec<char> = state1.chars().collect();
    let middle = chars.len() - 20;
    chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
    let tampered: String = chars.into_iter().collect();
    refused(
        &call(
            url,
            &retry(2, json!({"step1": accept("name", "Ann")}), &tampered),
            &[],
        )
        .await,
        "tampered",
    );
    let other = tool_call(
        3,
        "test_input_required_result_elicitation",
        json!({}),
        json!({"inputResponses": {}, "requestState": state1}),
        all_caps(),
    );
    refused(&call(url, &other, &[]).await, "other_request");

    // Round two, then three.
    let second = call(
        url,
        &retry(4, json!({"step1": accept("name", "Ann")}), &state1),
        &[],
    )
    .await;
    let result = &second.response["result"];
    assert_eq!(result["resultType"], "input_required", "{second:?}");
    assert!(result["inputRequests"]["step2"].is_object(), "{second:?}");
    let state2 = result["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state1, state2);
    // The first state was used: presenting it again is a replay.
    refused(
        &call(
            url,
            &retry(5, json!({"step1": accept("name", "Ann")}), &state1),
            &[],
        )
        .await,
        "replayed",
    );
    let third = call(
        url,
        &retry(6, json!({"step2": accept("color", "blue")}), &state2),
        &[],
    )
    .await;
    assert_eq!(text(&third.response), "Ann likes blue.");
    assert_eq!(third.response["result"]["resultType"], "complete");

    // A state outlives its TTL: expired.
    let fresh = call(
        url,
        &tool_call(7, tool, json!({}), json!({}), all_caps()),
        &[],
    )
    .await;
    let state = fresh.response["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    refused(
        &call(
            url,
            &retry(8, json!({"step1": accept("name", "Ann")}), &state),
            &[],
        )
        .await,
        "expired",
    );

    // A malformed answer is asked again, never taken.
    let bad = call(
        url,
        &tool_call(
            9,
            "test_input_required_result_elicitation",
            json!({}),
            json!({"inputResponses": {"user_name": 12345}}),
            all_caps(),
        ),
        &[],
    )
    .await;
    assert_eq!(
        bad.response["result"]["resultType"], "input_required",
        "{bad:?}"
    );
    // Only what the client declared is asked.
    let sampling_only = call(
        url,
        &tool_call(
            10,
            "test_input_required_result_capabilities",
            json!({}),
            json!({}),
            json!({"sampling": {}}),
        ),
        &[],
    )
    .await;
    let asked = sampling_only.response["result"]["inputRequests"]
        .as_object()
        .unwrap();
    assert!(
        asked
            .values()
            .all(|r| r["method"] == "sampling/createMessage"),
        "{sampling_only:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn log_messages_go_only_to_requests_that_ask_for_a_level() {
    let node = node(&[]);
    let url = node.url();
    // The log notifications a call of test_tool_with_logging gets, with
    // this `_meta` log level (none: no level).
    let logged = |id: u64, level: Option<&'static str>| async move {
        let mut m = meta(json!({}));
        if let Some(level) = level {
            m["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        let params = json!({"name": "test_tool_with_logging", "arguments": {}, "_meta": m});
        let answer = call(url, &request(id, "tools/call", params, json!({})), &[]).await;
        let messages = answer
            .notifications
            .iter()
            .filter(|n| n["method"] == "notifications/message")
            .count();
        (messages, answer)
    };
    let (quiet, answer) = logged(1, None).await;
    assert_eq!(quiet, 0, "{answer:?}");
    let (loud, answer) = logged(2, Some("info")).await;
    assert!(loud >= 1, "{answer:?}");
    let (strict, answer) = logged(3, Some("error")).await;
    assert_eq!(strict, 0, "info is below error: {answer:?}");
}

#[tokio::test]
async fn listen_acknowledges_first_and_sends_only_what_the_filter_asks() {
    // A quiet stream learns that its client left when it next writes: a
    // keep-alive each second here (15 s by default).
    let config = std::env::temp_dir().join(format!("listen-e2e-{}.toml", std::process::id()));
    std::fs::write(&config, "[runtime]\nsse_keep_alive_secs = 1\n").unwrap();
    let node = node(&["--config", config.to_str().unwrap()]);
    let url = node.url();
    let listen = |id: u64, filter: Value| {
        request(
            id,
            "subscriptions/listen",
            json!({"notifications": filter}),
            json!({}),
        )
    };
    let mut tools =
        Messages::new(send(url, &listen(41, json!({"toolsListChanged": true})), &[]).await);
    let mut prompts =
        Messages::new(send(url, &listen(42, json!({"promptsListChanged": true})), &[]).await);
    for (stream, id, filter) in [
        (&mut tools, 41, "toolsListChanged"),
        (&mut prompts, 42, "promptsListChanged"),
    ] {
        let ack = stream.next().await.expect("acknowledgement");
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        assert_eq!(
            ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            id
        );
        assert_eq!(ack["params"]["notifications"], json!({filter: true}));
    }
    call(
        url,
        &tool_call(
            1,
            "test_trigger_tool_change",
            json!({}),
            json!({}),
            json!({}),
        ),
        &[],
    )
    .await;
    let change = tools.next().await.expect("tools list change");
    assert_eq!(change["method"], "notifications/tools/list_changed");
    assert_eq!(
        change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        41
    );
    assert!(
        prompts
            .next_within(Duration::from_millis(500))
            .await
            .is_err(),
        "the prompts stream did not ask for tool changes"
    );
    // Both streams count as listen streams while open.
    assert_eq!(
        metric(&base(&node), "mcp_sse_streams_open{kind=\"listen\"}").await,
        2.0
    );
    drop(tools);
    drop(prompts);
    let mut open = 2.0;
    for _ in 0..50 {
        open = metric(&base(&node), "mcp_sse_streams_open{kind=\"listen\"}").await;
        if open == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(open, 0.0, "closed listen streams are let go");
    let _ = std::fs::remove_file(config);
}

#[tokio::test]
async fn closing_the_response_stream_cancels_the_request() {
    let node = node(&[]);
    let url = node.url();
    let mut m = meta(json!({}));
    m["progressToken"] = json!("p");
    let body = request(
        1,
        "tools/call",
        json!({"name": "long_running_operation",
               "arguments": {"duration_ms": 60_000, "steps": 600},
               "_meta": m}),
        json!({}),
    );
    let mut stream = Messages::new(send(url, &body, &[]).await);
    let first = stream.next().await.expect("progress");
    assert_eq!(first["method"], "notifications/progress");
    let running = "mcp_requests_in_flight";
    assert_eq!(metric(&base(&node), running).await, 1.0);
    drop(stream);
    let mut left = 1.0;
    for _ in 0..50 {
        left = metric(&base(&node), running).await;
        if left == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0.0, "the handler stopped when its client went away");
}

#[tokio::test]
async fn listen_streams_and_running_tasks_are_bounded_per_node() {
    let config = std::env::temp_dir().join(format!("bounds-e2e-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        // Keep-alives each second: a stream's write finds its client gone.
        "[runtime]\nmax_listen_streams = 2\nmax_running_tasks = 1\nsse_keep_alive_secs = 1\n",
    )
    .unwrap();
    let node = node(&["--config", config.to_str().unwrap()]);
    let url = node.url();
    let listen = |id: u64| {
        request(
            id,
            "subscriptions/listen",
            json!({"notifications": {}}),
            json!({}),
        )
    };
    let mut held = Vec::new();
    for id in [1, 2] {
        let mut stream = Messages::new(send(url, &listen(id), &[]).await);
        let ack = stream.next().await.expect("acknowledgement");
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        held.push(stream);
    }
    let third = call(url, &listen(3), &[]).await;
    assert_eq!(third.status, 503, "{third:?}");
    assert_eq!(third.response["id"], 3);
    // A stream whose client went leaves the registry: its place is free.
    drop(held.pop());
    let mut reopened = None;
    for id in 100..150 {
        let res = send(url, &listen(id), &[]).await;
        if res.status() == 200 {
            reopened = Some(Messages::new(res));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut reopened = reopened.expect("a listen stream opens once another closed");
    let ack = reopened.next().await.expect("acknowledgement");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    held.push(reopened);

    let caps = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let slow = |id: u64| {
        tool_call(
            id,
            "slow_compute",
            json!({"seconds": 30, "label": "b"}),
            json!({}),
            caps.clone(),
        )
    };
    let first = call(url, &slow(4), &[]).await;
    assert_eq!(first.response["result"]["resultType"], "task", "{first:?}");
    let second = call(url, &slow(5), &[]).await;
    assert_eq!(second.status, 503, "{second:?}");
    // Once the running task ends, a new one starts.
    let task = first.response["result"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    call(
        url,
        &request(6, "tasks/cancel", json!({"taskId": task}), caps.clone()),
        &[],
    )
    .await;
    let mut started = None;
    for id in 7..100 {
        let again = call(url, &slow(id), &[]).await;
        if again.status == 200 {
            started = Some(again);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = started.expect("a task starts once the running one was cancelled");
    assert_eq!(started.response["result"]["resultType"], "task");
    drop(held);
    let _ = std::fs::remove_file(config);
}
