//! The 2026-07-28 era across a cluster (three nodes sharing one Redis):
//! an input-required request whose rounds land on different nodes completes,
//! each state is accepted once cluster-wide, and a change raised on one node
//! reaches `subscriptions/listen` streams on every node.

mod cluster_support;
mod stateless_support;

use serde_json::json;
use stateless_support::*;

#[tokio::test]
async fn each_round_of_an_input_required_request_may_land_on_another_node() {
    let cluster = cluster_support::start(3, &[]);
    let node = |i: usize| cluster.node_url(i);
    let tool = "test_input_required_result_multi_round";

    let first = call(
        &node(0),
        &tool_call(1, tool, json!({}), json!({}), all_caps()),
        &[],
    )
    .await;
    let state1 = first.response["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("{first:?}"))
        .to_owned();
    let retry = |id: u64, answers: serde_json::Value, state: &str| {
        tool_call(
            id,
            tool,
            json!({}),
            json!({"inputResponses": answers, "requestState": state}),
            all_caps(),
        )
    };
    let second = call(
        &node(1),
        &retry(2, json!({"step1": accept("name", "Bo")}), &state1),
        &[],
    )
    .await;
    let state2 = second.response["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("{second:?}"))
        .to_owned();
    // Used on node 1: node 2 refuses it as a replay.
    let replay = call(
        &node(2),
        &retry(3, json!({"step1": accept("name", "Bo")}), &state1),
        &[],
    )
    .await;
    assert_eq!(
        replay.response["error"]["data"]["reason"], "replayed",
        "{replay:?}"
    );
    let third = call(
        &node(2),
        &retry(4, json!({"step2": accept("color", "red")}), &state2),
        &[],
    )
    .await;
    assert_eq!(text(&third.response), "Bo likes red.");

    // Through the load balancer (round robin), the conformance fixtures'
    // shape: one question, one retry.
    let lb = cluster.lb_url();
    let asked = call(
        &lb,
        &tool_call(
            5,
            "test_input_required_result_elicitation",
            json!({}),
            json!({}),
            all_caps(),
        ),
        &[],
    )
    .await;
    let state = asked.response["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = call(
        &lb,
        &tool_call(
            6,
            "test_input_required_result_elicitation",
            json!({}),
            json!({"inputResponses": {"user_name": accept("name", "Cy")}, "requestState": state}),
            all_caps(),
        ),
        &[],
    )
    .await;
    assert_eq!(text(&done.response), "Hello, Cy!");
}

#[tokio::test]
async fn a_change_on_one_node_reaches_listen_streams_on_every_node() {
    let cluster = cluster_support::start(3, &[]);
    let listen = |id: u64| {
        request(
            id,
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}}),
            json!({}),
        )
    };
    let mut streams = Vec::new();
    for i in 0..2 {
        let mut stream =
            Messages::new(send(&cluster.node_url(i), &listen(50 + i as u64), &[]).await);
        let ack = stream.next().await.expect("acknowledgement");
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        streams.push(stream);
    }
    call(
        &cluster.node_url(2),
        &tool_call(
            1,
            "test_trigger_prompt_change",
            json!({}),
            json!({}),
            json!({}),
        ),
        &[],
    )
    .await;
    for (i, stream) in streams.iter_mut().enumerate() {
        let change = stream.next().await.expect("a change");
        assert_eq!(
            change["method"], "notifications/prompts/list_changed",
            "node {i}"
        );
        assert_eq!(
            change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            50 + i as u64
        );
    }
}
