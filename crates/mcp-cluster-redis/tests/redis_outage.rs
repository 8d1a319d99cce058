//! Redis goes away: calls fail fast with `Unavailable`; Redis comes back on
//! the same address: the same store works again, wake-ups and bus included.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_redis::{Keys, connect};
use mcp_cluster_store::{ControlMessage, NodeId, Position, SessionId, Store, StoreError, suite};
use support::RedisServer;
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

/// Runs `call`, asserting it fails with `Unavailable` within twice the
/// command timeout.
async fn fails_fast<T: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) {
    let started = Instant::now();
    let result = call.await;
    let took = started.elapsed();
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "{what}: {result:?}"
    );
    assert!(took <= timeout * 2, "{what} took {took:?}");
}

async fn until_ready(store: &Store) {
    let deadline = Instant::now() + WAIT;
    while store.sessions.ping().await.is_err() {
        assert!(Instant::now() < deadline, "store reconnects");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn calls_fail_fast_while_redis_is_down_and_recover_after_restart() {
    let mut server = RedisServer::start();
    let config = server.config();
    let timeout = config.command_timeout();
    let a = connect(&config).await.unwrap();
    let b = connect(&config).await.unwrap();
    let s = SessionId::random();
    let stream = a.events.create_stream(&s, &[]).await.unwrap();
    let mut wake = b.events.subscribe(&s, &stream).await.unwrap();
    let mut control = b.bus.subscribe();
    let node = NodeId::random();

    server.kill();
    for _ in 0..2 {
        fails_fast("ping", timeout, a.sessions.ping()).await;
        fails_fast("load", timeout, a.sessions.load(&s)).await;
        fails_fast(
            "append",
            timeout,
            a.events.append(&s, &stream, Arc::from("x")),
        )
        .await;
        fails_fast(
            "read",
            timeout,
            b.events.read(&s, &stream, Position::START, 10),
        )
        .await;
        fails_fast("create", timeout, a.events.create_stream(&s, &[])).await;
        fails_fast("subscribe", timeout, b.events.subscribe(&s, &stream)).await;
        let message = ControlMessage::SessionChanged {
            session: s.clone(),
            origin: node.clone(),
        };
        fails_fast("publish", timeout, a.bus.publish(&message)).await;
        fails_fast(
            "heartbeat",
            timeout,
            a.nodes.heartbeat(&node, Duration::from_secs(5)),
        )
        .await;
    }

    server.restart();
    until_ready(&a).await;
    until_ready(&b).await;

    // The reconnected pub/sub connection bumps every watch once (a wake-up
    // may have been missed), then delivers on the channels it held again.
    assert!(tokio::time::timeout(WAIT, wake.changed()).await.unwrap());
    let mut raw = support::raw(&server).await;
    let receivers: i64 = redis::cmd("PUBLISH")
        .arg(Keys::default().wake(&s, &stream))
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(receivers, 1, "the wake channel was subscribed again");
    assert!(tokio::time::timeout(WAIT, wake.changed()).await.unwrap());

    // The control channel too.
    let message = ControlMessage::SessionEnded {
        session: s.clone(),
        origin: node.clone(),
    };
    a.bus.publish(&message).await.unwrap();
    let got = tokio::time::timeout(WAIT, control.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, message);

    // Redis restarted empty: new streams, scripts loaded again, wake-ups
    // from node to node, and the whole suite, on the same stores.
    let stream = a.events.create_stream(&s, &[]).await.unwrap();
    let mut wake = b.events.subscribe(&s, &stream).await.unwrap();
    a.events
        .append(&s, &stream, Arc::from("after"))
        .await
        .unwrap();
    assert!(tokio::time::timeout(WAIT, wake.changed()).await.unwrap());
    let batch = b
        .events
        .read(&s, &stream, Position::START, 10)
        .await
        .unwrap();
    assert_eq!(&*batch.events[0].data, "after");
    suite::run_all(&a).await;
}
