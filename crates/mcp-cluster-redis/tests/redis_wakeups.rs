//! Wake-ups across nodes over the node's one pub/sub connection.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_redis::connect;
use mcp_cluster_store::{Position, SessionId, StoreError};
use support::RedisServer;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn append_on_one_node_wakes_a_reader_on_another() {
    let server = RedisServer::start();
    let a = connect(&server.config()).await.unwrap();
    let b = connect(&server.config()).await.unwrap();
    let s = SessionId::random();
    let stream = a.events.create_stream(&s, &[]).await.unwrap();
    let mut wake = b.events.subscribe(&s, &stream).await.unwrap();
    let first = a.events.append(&s, &stream, Arc::from("1")).await.unwrap();
    assert!(tokio::time::timeout(WAIT, wake.changed()).await.unwrap());
    let batch = b
        .events
        .read(&s, &stream, Position::START, 10)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.events[0].position, first.position);

    // Both nodes append to one stream: Redis mints every position, so they
    // keep increasing whichever node writes.
    let mut last = first.position;
    for i in 0..20 {
        let writer = if i % 2 == 0 { &b } else { &a };
        let id = writer
            .events
            .append(&s, &stream, Arc::from(i.to_string()))
            .await
            .unwrap();
        assert!(id.position > last, "positions increase across nodes");
        last = id.position;
    }
    a.events.close_stream(&s, &stream, "owner").await.unwrap();
    assert!(tokio::time::timeout(WAIT, wake.changed()).await.unwrap());
    let batch = b
        .events
        .read(&s, &stream, first.position, 100)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 20);
    assert!(batch.closed);
}

#[tokio::test]
async fn deleting_a_session_wakes_readers_who_find_the_stream_gone() {
    let server = RedisServer::start();
    let a = connect(&server.config()).await.unwrap();
    let b = connect(&server.config()).await.unwrap();
    let s = SessionId::random();
    let stream = a.events.create_stream(&s, &[]).await.unwrap();
    let mut wake = b.events.subscribe(&s, &stream).await.unwrap();
    a.events.delete_session(&s).await.unwrap();
    assert!(tokio::time::timeout(WAIT, wake.changed()).await.unwrap());
    assert_eq!(
        b.events.tail(&s, &stream).await.unwrap_err(),
        StoreError::StreamNotFound
    );
}

#[tokio::test]
async fn many_subscriptions_share_the_one_pubsub_connection() {
    let server = RedisServer::start();
    let mut raw = support::raw(&server).await;
    let before = support::client_count(&mut raw).await;
    let store = connect(&server.config()).await.unwrap();
    let with_store = support::client_count(&mut raw).await;
    assert_eq!(
        with_store,
        before + 2,
        "a store holds one command and one pub/sub connection"
    );

    // 200 streams created at once, the store's first commands: the thread
    // opens one connection of its own, not one per command in flight.
    let s = SessionId::random();
    let streams =
        futures_util::future::try_join_all((0..200).map(|_| store.events.create_stream(&s, &[])))
            .await
            .unwrap();
    let wakes = futures_util::future::try_join_all(
        streams
            .iter()
            .map(|stream| store.events.subscribe(&s, stream)),
    )
    .await
    .unwrap();
    assert_eq!(wakes.len(), 200);
    // The one thread that sent commands opened its own command connection
    // (see `Primary::local`); the subscriptions opened none.
    assert_eq!(
        support::client_count(&mut raw).await,
        with_store + 1,
        "200 streams and subscriptions from one thread open one connection"
    );
    let numsub = |con: &mut redis::aio::MultiplexedConnection| {
        let channel = mcp_cluster_redis::Keys::default().wake(&s, &streams[0]);
        let mut con = con.clone();
        async move {
            let reply: (String, usize) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(channel)
                .query_async(&mut con)
                .await
                .unwrap();
            reply.1
        }
    };
    assert_eq!(numsub(&mut raw).await, 1);

    // Dropping the last receiver of a channel unsubscribes it.
    drop(wakes);
    let deadline = tokio::time::Instant::now() + WAIT;
    while numsub(&mut raw).await != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "unused channels are unsubscribed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut raw)
        .await
        .unwrap();
    channels.sort();
    assert_eq!(channels, ["mcp:ctl"], "only the control channel is left");

    // And a new subscription to a swept channel works again.
    let mut wake = store.events.subscribe(&s, &streams[0]).await.unwrap();
    store
        .events
        .append(&s, &streams[0], Arc::from("x"))
        .await
        .unwrap();
    assert!(tokio::time::timeout(WAIT, wake.changed()).await.unwrap());

    // Dropping the store stops its pub/sub task and closes both connections;
    // its remaining wake-ups end.
    drop(store);
    assert!(!tokio::time::timeout(WAIT, wake.changed()).await.unwrap());
    let deadline = tokio::time::Instant::now() + WAIT;
    while support::client_count(&mut raw).await != before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a dropped store closes its connections"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
