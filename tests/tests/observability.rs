//! What an operator sees of a node, read as a scraper and a log shipper
//! read it: `/metrics` on the admin listener only when there is one (the
//! main listener answers 404), else on the main one (outside the Host
//! check of `/mcp`, accepted by `promtool check metrics`), counters
//! that follow what clients did, and one access-log line per HTTP request
//! carrying the client's `X-Request-Id`.

use std::process::Command;

use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{NodeProcess, free_port, node_binary, within};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};

const VERSION: &str = "2025-11-25";

/// One sample of the text exposition format: `name{labels} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of an exposition (label values here never hold `,` `"` or
/// `}`: the node's labels are methods, codes and fixed words).
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap();
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().unwrap(),
            }
        })
        .collect()
}

/// The sum of the samples named `name` whose labels include `labels`.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text)
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|s| s.value)
        .sum()
}

async fn scrape(base: &str, host: Option<&str>) -> String {
    let mut request = reqwest::Client::new().get(format!("{base}/metrics"));
    if let Some(host) = host {
        request = request.header("Host", host);
    }
    let response = within("scrape", request.send()).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    response.text().await.unwrap()
}

async fn call(client: &Client, id: i64, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    match within(method, client.post(&body)).await.unwrap() {
        Reply::Json(value, _) => value,
        other => panic!("{method}: {other:?}"),
    }
}

#[tokio::test]
async fn metrics_follow_what_clients_did_and_pass_promtool() {
    let admin = format!("127.0.0.1:{}", free_port().unwrap());
    let node =
        NodeProcess::spawn(&node_binary(), &["--log", "warn", "--admin-bind", &admin]).unwrap();
    let base = node.url().trim_end_matches("/mcp").to_owned();
    let admin_base = format!("http://{admin}");

    let mut client = Client::new(node.url(), VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let echo = call(
        &client,
        2,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "x"}}),
    )
    .await;
    assert!(echo["result"].is_object(), "{echo}");
    for id in 3..6 {
        let unknown = call(
            &client,
            id,
            "tools/call",
            json!({"name": format!("no-such-tool-{id}")}),
        )
        .await;
        assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    }
    let listed = call(&client, 6, "tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array());
    // The standalone stream, open while scraping.
    let stream = within("GET", client.get(None)).await.unwrap();
    assert!(matches!(stream, Reply::Sse(_)), "{stream:?}");

    // The admin listener serves /metrics whatever the Host (a scraper
    // addresses the pod), while /mcp refuses that Host; the public port
    // does not serve it at all.
    let text = scrape(&admin_base, Some("metrics.example")).await;
    let public = within(
        "GET /metrics on the main listener",
        reqwest::get(format!("{base}/metrics")),
    )
    .await
    .unwrap();
    assert_eq!(public.status(), 404);
    assert!(!public.text().await.unwrap().contains("mcp_"));
    let refused = reqwest::Client::new()
        .post(node.url())
        .header("Host", "metrics.example")
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);

    let op = "mcp_server_operation_duration_seconds_count";
    let call_labels = [
        ("mcp_method_name", "tools/call"),
        ("mcp_protocol_version", VERSION),
        ("network_transport", "tcp"),
    ];
    assert_eq!(value(&text, op, &[("mcp_method_name", "initialize")]), 1.0);
    assert_eq!(
        value(
            &text,
            op,
            &[
                call_labels[0],
                call_labels[1],
                ("gen_ai_tool_name", "echo"),
                ("error_type", "")
            ]
        ),
        1.0
    );
    // Unknown tools are one label value, whatever the client sent.
    assert_eq!(
        value(
            &text,
            op,
            &[("gen_ai_tool_name", "_OTHER"), ("error_type", "-32602")]
        ),
        3.0
    );
    assert!(
        !text.contains("no-such-tool"),
        "a client-chosen name became a label"
    );
    assert_eq!(value(&text, op, &[("mcp_method_name", "tools/list")]), 1.0);
    assert_eq!(
        value(
            &text,
            "mcp_sessions_created_total",
            &[("transport", "streamable_http")]
        ),
        1.0
    );
    assert_eq!(value(&text, "mcp_sessions_held", &[]), 1.0);
    assert_eq!(
        value(&text, "mcp_sse_streams_open", &[("kind", "standalone")]),
        1.0
    );
    assert_eq!(
        value(&text, "mcp_http_answers_total", &[("kind", "json")]),
        6.0
    );
    assert_eq!(
        value(&text, "mcp_node_drain_phase", &[("phase", "serving")]),
        1.0
    );
    assert!(value(&text, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(value(&text, "process_open_fds", &[]) > 0.0);
    assert_eq!(value(&text, "mcp_build_info", &[]), 1.0);
    assert!(
        !text.contains(client.session_id().unwrap()),
        "a session id became a label"
    );

    // The refusal above is counted by reason.
    let admin_text = scrape(&admin_base, None).await;
    assert_eq!(
        value(
            &admin_text,
            "mcp_http_rejections_total",
            &[("reason", "forbidden_host")]
        ),
        1.0
    );
    assert_eq!(
        value(&admin_text, op, &[("mcp_method_name", "tools/list")]),
        1.0
    );

    drop(stream);
    assert_eq!(
        within("DELETE", client.delete()).await.unwrap(),
        reqwest::StatusCode::OK
    );
    let after = scrape(&admin_base, None).await;
    assert_eq!(
        value(&after, "mcp_sessions_ended_total", &[("reason", "deleted")]),
        1.0
    );
    assert_eq!(
        value(
            &after,
            "mcp_server_session_duration_seconds_count",
            &[("mcp_protocol_version", VERSION)]
        ),
        1.0
    );

    // The exposition is valid for Prometheus's own checker.
    let path = std::env::temp_dir().join(format!("mcp-metrics-{}.txt", std::process::id()));
    std::fs::write(&path, &after).unwrap();
    let check = Command::new("sh")
        .arg("-c")
        .arg(format!("promtool check metrics < {}", path.display()))
        .output()
        .expect("promtool (Debian package prometheus) must be installed");
    let _ = std::fs::remove_file(&path);
    assert!(
        check.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[tokio::test]
async fn without_an_admin_listener_metrics_are_on_the_main_one_for_allowed_hosts() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let base = node.url().trim_end_matches("/mcp").to_owned();
    let text = scrape(&base, None).await;
    assert_eq!(value(&text, "mcp_build_info", &[]), 1.0);
    // A page that rebinds its own name to the node's address sends that
    // name as Host (and its Origin): refused, as on the MCP endpoint.
    let http = reqwest::Client::new();
    let rebound = within(
        "scrape as another host",
        http.get(format!("{base}/metrics"))
            .header("Host", "rebound.example:80")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(rebound.status(), 403);
    let body = rebound.text().await.unwrap();
    assert!(!body.contains("mcp_build_info"), "{body}");
    let foreign_origin = within(
        "scrape from a foreign origin",
        http.get(format!("{base}/metrics"))
            .header("Origin", "http://rebound.example")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(foreign_origin.status(), 403);
    // A host the operator allowed is served.
    let node = NodeProcess::spawn(
        &node_binary(),
        &["--log", "warn", "--allowed-hosts", "metrics.example"],
    )
    .unwrap();
    let base = node.url().trim_end_matches("/mcp").to_owned();
    let text = scrape(&base, Some("metrics.example")).await;
    assert_eq!(value(&text, "mcp_build_info", &[]), 1.0);
}

#[tokio::test]
async fn every_http_request_has_an_access_log_line_and_a_request_id() {
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", "warn,mcp_access=info", "--log-json"],
        &[],
    )
    .unwrap();
    let mut client = Client::new(node.url(), VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("x-request-id", HeaderValue::from_static("trace-me-42"));
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"message": "x"}}});
    let Reply::Json(answer, response_headers) = within("call", client.post_with(&body, headers))
        .await
        .unwrap()
    else {
        panic!("a JSON answer");
    };
    assert!(answer["result"].is_object(), "{answer}");
    assert_eq!(response_headers["x-request-id"], "trace-me-42");
    // Without one, the node makes one up and says which.
    let Reply::Json(_, generated) = within("call", client.post(&body)).await.unwrap() else {
        panic!("a JSON answer");
    };
    let generated = generated["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(generated.len(), 32, "{generated}");

    let line = node.wait_for_log("trace-me-42").unwrap();
    let entry: Value = serde_json::from_str(&line).unwrap();
    let fields = &entry["fields"];
    assert_eq!(entry["target"], "mcp_access", "{line}");
    assert_eq!(fields["method"], "POST", "{line}");
    assert_eq!(fields["path"], "/mcp", "{line}");
    assert_eq!(fields["status"], 200, "{line}");
    assert_eq!(fields["rpc_method"], "tools/call", "{line}");
    assert_eq!(fields["session_id"], client.session_id().unwrap(), "{line}");
    assert!(fields["duration_ms"].as_f64().unwrap() >= 0.0, "{line}");
    node.wait_for_log(&generated).unwrap();
    // One line per request: initialize, initialized, and the two calls.
    let lines = node
        .log()
        .iter()
        .filter(|l| l.contains("\"mcp_access\""))
        .count();
    assert_eq!(lines, 4, "{:#?}", node.log());
}

/// Retention and replays are counted where they happen, in either store.
async fn retention_is_counted(node: &NodeProcess) {
    let base = node.url().trim_end_matches("/mcp").to_owned();
    let mut client = Client::new(node.url(), VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "long_running_operation",
                   "arguments": {"duration_ms": 50, "steps": 5},
                   "_meta": {"progressToken": "p"}}});
    let Reply::Sse(mut stream) = within("POST", client.post(&body)).await.unwrap() else {
        panic!("progress makes the answer a stream");
    };
    let mut messages = 0;
    while within("next", stream.next_message())
        .await
        .unwrap()
        .is_some()
    {
        messages += 1;
    }
    // Five progress notifications and the response, read as they came.
    assert_eq!(messages, 6);
    let text = scrape(&base, None).await;
    // The stream keeps 2 events: the 4 oldest were dropped, one per append.
    assert_eq!(value(&text, "mcp_event_log_appends_total", &[]), 6.0);
    assert_eq!(value(&text, "mcp_event_log_trims_total", &[]), 4.0);
    assert!(value(&text, "mcp_event_log_replayed_events_total", &[]) >= 2.0);
    assert_eq!(
        value(&text, "mcp_http_answers_total", &[("kind", "sse")]),
        1.0
    );
}

#[tokio::test]
async fn retention_is_counted_on_the_embedded_store() {
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", "warn"],
        &[("MCP_RETENTION__MAX_EVENTS_PER_STREAM", "2")],
    )
    .unwrap();
    retention_is_counted(&node).await;
}

#[tokio::test]
async fn retention_is_counted_on_redis() {
    let redis = mcp_cluster_testkit::RedisServer::start().unwrap();
    let node = NodeProcess::spawn_logged(
        &node_binary(),
        &["--log", "warn", "--redis-url", &redis.url()],
        &[("MCP_RETENTION__MAX_EVENTS_PER_STREAM", "2")],
    )
    .unwrap();
    retention_is_counted(&node).await;
    let text = scrape(node.url().trim_end_matches("/mcp"), None).await;
    // Every round trip to Redis is timed by operation.
    assert!(
        value(
            &text,
            "mcp_redis_command_duration_seconds_count",
            &[("operation", "stream_append")]
        ) >= 6.0
    );
    assert!(value(&text, "mcp_heartbeats_total", &[("outcome", "ok")]) >= 1.0);
}
