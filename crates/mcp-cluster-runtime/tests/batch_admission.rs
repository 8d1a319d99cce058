//! A JSON-RPC batch is admitted whole or refused whole: when the session
//! cannot start every request of it, each request gets an error and nothing
//! in the batch takes effect (no request runs, no subscription is kept).

#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use mcp_cluster_protocol::{ErrorCode, Message, Request, RequestId};
use mcp_cluster_runtime::{ExchangeReply, RuntimeConfig};
use serde_json::json;
use support::*;

fn subscribe(id: i64, uri: &str) -> Message {
    Message::Request(Request::new(
        RequestId::Number(id),
        "resources/subscribe",
        json!({ "uri": uri }),
    ))
}

#[actix_rt::test]
async fn a_batch_that_cannot_start_whole_is_refused_whole() {
    let runtime = runtime(RuntimeConfig {
        max_in_flight_per_session: 4,
        ..RuntimeConfig::default()
    });
    let session = initialized(&runtime).await;
    // Two calls hold two of the four slots.
    for id in [1, 2] {
        let (exchange, _reply) = runtime.exchange(&session, vec![RequestId::Number(id)]);
        session.dispatch(tool_call(id), exchange).unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), async {
        while runtime.in_flight() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();

    // Three calls and a subscription: four requests, two free slots.
    let messages = vec![
        Message::Request(tool_call(10)),
        subscribe(11, "test://refused"),
        Message::Request(tool_call(12)),
        Message::Request(tool_call(13)),
    ];
    let ids: Vec<RequestId> = (10..14).map(RequestId::Number).collect();
    let (exchange, reply) = runtime.batch_exchange(&session, ids.clone(), Vec::new());
    session.dispatch_batch(messages, exchange).unwrap();
    let ExchangeReply::Json(responses) = reply.await.unwrap() else {
        panic!("a refused batch is answered at once");
    };
    let mut answered: Vec<RequestId> = responses.iter().filter_map(|r| r.id.clone()).collect();
    answered.sort();
    assert_eq!(answered, ids);
    for r in &responses {
        let err = r.outcome.as_ref().unwrap_err();
        assert_eq!(err.code, ErrorCode::INTERNAL_ERROR, "{r:?}");
        assert!(
            err.message.contains("nothing in the batch was run"),
            "{r:?}"
        );
    }
    assert_eq!(runtime.in_flight(), 2, "no call of the refused batch runs");
    let held = record(&runtime, &session).await;
    assert!(held.subscriptions.is_empty(), "{:?}", held.subscriptions);

    // A batch that fits runs whole.
    let messages = vec![
        Message::Request(tool_call(20)),
        subscribe(21, "test://kept"),
    ];
    let ids = vec![RequestId::Number(20), RequestId::Number(21)];
    let (exchange, reply) = runtime.batch_exchange(&session, ids, Vec::new());
    session.dispatch_batch(messages, exchange).unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while runtime.in_flight() < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap();
    let held = record(&runtime, &session).await;
    assert!(
        held.subscriptions.contains("test://kept"),
        "{:?}",
        held.subscriptions
    );
    // The call logs, so the batch's answer is a stream.
    assert!(matches!(reply.await.unwrap(), ExchangeReply::Stream(..)));
}
