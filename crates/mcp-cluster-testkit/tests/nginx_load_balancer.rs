//! The nginx load balancer: plain round robin over the nodes (no
//! stickiness), the client's Host passed through, SSE unbuffered.

use std::net::SocketAddr;

use anyhow::Context;
use mcp_cluster::ServerBuilder;
use mcp_cluster_client::{Client, Reply};
use mcp_cluster_testkit::{InProcessNode, Nginx, fixtures, raw_http, within};
use serde_json::{Value, json};

/// POSTs `initialize` through `lb` on a fresh connection and returns the
/// answering server's name.
fn initialize_through(lb: SocketAddr) -> anyhow::Result<String> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "lb-test", "version": "0"}}})
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {lb}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\
         Connection: close",
        body.len()
    );
    let (status, response) = raw_http(lb, &head, &body)?;
    anyhow::ensure!(status == 200, "status {status}: {response}");
    // JSON or one SSE event, possibly chunked: the message is the outermost
    // braces.
    let (start, end) = response
        .find('{')
        .zip(response.rfind('}'))
        .context("no JSON in the response")?;
    let message: Value = serde_json::from_str(&response[start..=end])?;
    let name = message["result"]["serverInfo"]["name"].as_str();
    Ok(name.context("no serverInfo.name")?.to_owned())
}

#[test]
fn successive_initializes_alternate_between_the_nodes() {
    let a = InProcessNode::start_default(ServerBuilder::new("a", "1").build()).unwrap();
    let b = InProcessNode::start_default(ServerBuilder::new("b", "1").build()).unwrap();
    let lb = Nginx::start(&[a.addr(), b.addr()]).unwrap();
    assert_eq!(lb.url(), format!("http://{}/mcp", lb.addr()));

    let names: Vec<String> = (0..6)
        .map(|_| initialize_through(lb.addr()).unwrap())
        .collect();

    for pair in names.windows(2) {
        assert_ne!(pair[0], pair[1], "round robin alternates: {names:?}");
    }
    assert_eq!(names.iter().filter(|n| *n == "a").count(), 3, "{names:?}");
    assert_eq!(names.iter().filter(|n| *n == "b").count(), 3, "{names:?}");
}

#[test]
fn a_dead_node_is_skipped() {
    let a = InProcessNode::start_default(ServerBuilder::new("a", "1").build()).unwrap();
    let b = InProcessNode::start_default(ServerBuilder::new("b", "1").build()).unwrap();
    let lb = Nginx::start(&[a.addr(), b.addr()]).unwrap();
    drop(b);

    for _ in 0..4 {
        assert_eq!(
            initialize_through(lb.addr()).unwrap(),
            "a",
            "{}",
            lb.access_log()
        );
    }
}

/// The tool waits for the client's answer to a request it sent on the SSE
/// stream, so that request must reach the client while the stream is open.
#[tokio::test]
async fn server_requests_on_sse_reach_the_client_through_nginx() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let lb = Nginx::start(&[node.addr()]).unwrap();
    let mut client = Client::new(&lb.url(), "2025-11-25");
    within("initialize", client.initialize(json!({"sampling": {}})))
        .await
        .unwrap();

    let call = json!({"jsonrpc": "2.0", "id": client.next_id(), "method": "tools/call",
                      "params": {"name": "sample", "arguments": {"prompt": "hi"}}});
    let Reply::Sse(mut stream) = within("call", client.post(&call)).await.unwrap() else {
        panic!("a call that asks the client is answered as SSE");
    };
    let ask = within("ask", stream.next_message()).await.unwrap().unwrap();
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");

    let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "through nginx"},
        "model": "m", "stopReason": "endTurn"}});
    let reply = within("answer", client.post(&answer)).await.unwrap();
    assert!(matches!(reply, Reply::Accepted), "{reply:?}");
    let result = within("result", stream.next_message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        result["result"]["content"][0]["text"], "through nginx",
        "{result}"
    );
}
