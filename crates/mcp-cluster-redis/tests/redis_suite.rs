//! The port suite against a real Redis, plus Redis retention: exact length
//! trimming and TTL expiry.

mod support;

use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_redis::{RedisConfig, RedisRetention, connect};
use mcp_cluster_store::{ControlMessage, NodeId, Position, SessionId, StoreError, suite};
use support::RedisServer;

#[tokio::test]
async fn redis_store_passes_the_port_suite() {
    let server = RedisServer::start();
    let store = connect(&server.config()).await.unwrap();
    suite::run_all(&store).await;
}

#[tokio::test]
async fn redis_store_holds_its_byte_budgets() {
    let server = RedisServer::start();
    let store = connect(&RedisConfig {
        retention: suite::byte_budget_retention().into(),
        ..server.config()
    })
    .await
    .unwrap();
    suite::byte_budgets_hold(&store).await;
}

#[tokio::test]
async fn streams_keep_at_most_the_configured_events_and_report_gaps() {
    let server = RedisServer::start();
    let store = connect(&RedisConfig {
        retention: RedisRetention {
            max_events_per_stream: 3,
            ..RedisRetention::default()
        },
        ..server.config()
    })
    .await
    .unwrap();
    let log = &store.events;
    let s = SessionId::random();
    let stream = log.create_stream(&s, &[]).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            log.append(&s, &stream, Arc::from(i.to_string()))
                .await
                .unwrap(),
        );
    }
    for gone in [Position::START, ids[0].position] {
        assert_eq!(
            log.read(&s, &stream, gone, 100).await.unwrap_err(),
            StoreError::Trimmed,
            "events 0 and 1 are gone"
        );
    }
    let batch = log.read(&s, &stream, ids[1].position, 100).await.unwrap();
    let got: Vec<_> = batch.events.iter().map(|e| e.data.to_string()).collect();
    assert_eq!(
        got,
        ["2", "3", "4"],
        "resuming right after the trimmed part has no gap"
    );
    let batch = log.read(&s, &stream, ids[3].position, 100).await.unwrap();
    assert_eq!(batch.events.len(), 1);
    let between = Position {
        seq: ids[4].position.seq + 1,
        ..ids[4].position
    };
    assert_eq!(
        log.read(&s, &stream, between, 100).await.unwrap_err(),
        StoreError::EventNotFound
    );
    assert_eq!(log.tail(&s, &stream).await.unwrap(), ids[4].position);
}

#[tokio::test]
async fn closed_and_idle_streams_and_idle_sessions_expire() {
    let server = RedisServer::start();
    let store = connect(&RedisConfig {
        retention: RedisRetention {
            closed_stream_ttl_ms: 300,
            idle_stream_ttl_ms: 700,
            ..RedisRetention::default()
        },
        ..server.config()
    })
    .await
    .unwrap();
    let log = &store.events;
    let s = SessionId::random();
    let closed = log.create_stream(&s, &[]).await.unwrap();
    log.append(&s, &closed, Arc::from("x")).await.unwrap();
    log.close_stream(&s, &closed, "owner").await.unwrap();
    let kept = log.create_stream(&s, &[]).await.unwrap();
    let idle = log.create_stream(&s, &[]).await.unwrap();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        log.touch(&s, &kept).await.unwrap();
    }
    assert_eq!(
        log.read(&s, &closed, Position::START, 1).await.unwrap_err(),
        StoreError::StreamNotFound,
        "closed stream expired"
    );
    assert_eq!(
        log.tail(&s, &idle).await.unwrap_err(),
        StoreError::StreamNotFound,
        "idle stream expired"
    );
    assert!(log.tail(&s, &kept).await.is_ok(), "touched stream kept");

    let r = suite::record();
    let ttl = Duration::from_millis(600);
    store.sessions.create(&r, ttl).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(store.sessions.touch(&r.id, ttl).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        store.sessions.load(&r.id).await.unwrap().is_some(),
        "touch renewed the TTL"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        store.sessions.load(&r.id).await.unwrap().is_none(),
        "idle session expired"
    );
}

#[tokio::test]
async fn clusters_with_different_prefixes_share_one_redis_apart() {
    let server = RedisServer::start();
    let blue = connect(&RedisConfig {
        key_prefix: "blue".into(),
        ..server.config()
    })
    .await
    .unwrap();
    let green = connect(&RedisConfig {
        key_prefix: "green".into(),
        ..server.config()
    })
    .await
    .unwrap();
    let r = suite::record();
    blue.sessions
        .create(&r, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(green.sessions.load(&r.id).await.unwrap().is_none());
    let stream = blue.events.create_stream(&r.id, &[]).await.unwrap();
    assert_eq!(
        green.events.tail(&r.id, &stream).await.unwrap_err(),
        StoreError::StreamNotFound
    );
    let mut con = support::raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!keys.is_empty());
    assert!(keys.iter().all(|k| k.starts_with("blue:")), "{keys:?}");
}

#[tokio::test]
async fn quota_keys_always_carry_a_ttl_and_go_when_they_hold_nothing() {
    use mcp_cluster_store::{QuotaKey, Rate};
    let server = RedisServer::start();
    let store = connect(&server.config()).await.unwrap();
    let rate = Rate {
        limit: 2,
        window: Duration::from_millis(400),
    };
    let lease = Duration::from_millis(400);
    let address = QuotaKey::new("initialize_per_address", "127.0.0.2");
    let principal = QuotaKey::new("sessions_per_principal", "https://idp/{x}#alice");
    assert!(
        store
            .quotas
            .hit(&address, 1, rate)
            .await
            .unwrap()
            .admitted()
    );
    assert!(
        store
            .quotas
            .acquire(&principal, "s1", 3, lease)
            .await
            .unwrap()
            .admitted()
    );
    store
        .quotas
        .renew(&principal, &["s2".into()], lease)
        .await
        .unwrap();
    let mut con = support::raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("mcp:quota:*")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(keys.len(), 2, "one key per subject and quota: {keys:?}");
    for key in &keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(ttl > 0 && ttl <= 400, "{key}: PTTL {ttl}");
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("mcp:quota:*")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

/// On one Redis a deletion takes the session's entry out of the expiry
/// index in the same script as its keys, a session's end takes its streams
/// and announcement with it, a save its announcement, and a control
/// message goes into the log and out on the channel in one script: nothing
/// of any is left for a second command to do.
#[tokio::test]
async fn a_deletion_and_a_control_message_each_finish_in_one_script() {
    let server = RedisServer::start();
    let store = connect(&server.config()).await.unwrap();
    let mut con = support::raw(&server).await;
    let r = suite::record();
    store
        .sessions
        .create(&r, Duration::from_secs(60))
        .await
        .unwrap();
    let indexed = |con: &mut redis::aio::MultiplexedConnection, id: &SessionId| {
        let mut con = con.clone();
        let id = id.as_str().to_owned();
        async move {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("mcp:{sessions:*}:expiry")
                .query_async(&mut con)
                .await
                .unwrap();
            let mut found = 0;
            for key in keys {
                let score: Option<f64> = redis::cmd("ZSCORE")
                    .arg(&key)
                    .arg(&id)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                found += usize::from(score.is_some());
            }
            found
        }
    };
    assert_eq!(
        indexed(&mut con, &r.id).await,
        1,
        "a new session is indexed"
    );
    assert!(store.sessions.delete(&r.id).await.unwrap());
    assert_eq!(indexed(&mut con, &r.id).await, 0, "a deleted one is not");
    assert!(!store.sessions.delete(&r.id).await.unwrap(), "gone already");

    // A session's change and its end carry their announcements: the
    // control log takes each (and the suite checks that the bus carries
    // them); the end takes the session's streams and index entry too.
    let origin = mcp_cluster_store::NodeId::random();
    let r = suite::record();
    let ttl = Duration::from_secs(60);
    store.sessions.create(&r, ttl).await.unwrap();
    let stream = store.events.create_stream(&r.id, &[]).await.unwrap();
    assert_eq!(indexed(&mut con, &r.id).await, 1);
    let logged = log_len(&con).await;
    let changed = mcp_cluster_store::ControlMessage::SessionChanged {
        session: r.id.clone(),
        origin: origin.clone(),
    };
    let saved = store
        .sessions
        .save_announcing(&r, ttl, &changed)
        .await
        .unwrap();
    assert!(saved.written && saved.announced, "{saved:?}");
    assert_eq!(log_len(&con).await, logged + 1);
    let ended = mcp_cluster_store::ControlMessage::SessionEnded {
        session: r.id.clone(),
        origin,
    };
    let done = store
        .sessions
        .end(&r.id, &*store.events, &ended)
        .await
        .unwrap();
    assert!(
        done.existed && done.streams_deleted && done.announced,
        "{done:?}"
    );
    assert_eq!(log_len(&con).await, logged + 2);
    assert_eq!(indexed(&mut con, &r.id).await, 0);
    let err = store
        .events
        .read(&r.id, &stream, Position::START, 1)
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::StreamNotFound);

    let mut rx = store.bus.subscribe();
    let message = mcp_cluster_store::ControlMessage::SessionEnded {
        session: r.id.clone(),
        origin: mcp_cluster_store::NodeId::random(),
    };
    let before: usize = redis::cmd("XLEN")
        .arg("mcp:{ctl}:log")
        .query_async(&mut con)
        .await
        .unwrap();
    store.bus.publish(&message).await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("the message arrives")
        .unwrap();
    assert_eq!(heard, message);
    let after: usize = redis::cmd("XLEN")
        .arg("mcp:{ctl}:log")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(after, before + 1, "and it is in the log");
    let ttl: i64 = redis::cmd("PTTL")
        .arg("mcp:{ctl}:log")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(ttl > 0, "the log expires: {ttl}");
}

/// The control log's length.
async fn log_len(con: &redis::aio::MultiplexedConnection) -> usize {
    redis::cmd("XLEN")
        .arg("mcp:{ctl}:log")
        .query_async::<usize>(&mut con.clone())
        .await
        .expect("XLEN of the control log")
}

/// The next message `rx` hears, within 5 s.
async fn heard(rx: &mut tokio::sync::broadcast::Receiver<ControlMessage>) -> ControlMessage {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("a message arrives")
        .expect("the bus is open")
}

/// A session's life on `store` by `origin`: created, saved with its
/// `session_changed`, a `deliver` published, ended with its
/// `session_ended`; each step says it did all it had to. The messages, in
/// that order.
async fn life_of(store: &mcp_cluster_store::Store, origin: &NodeId) -> [ControlMessage; 3] {
    let ttl = Duration::from_secs(60);
    let r = suite::record();
    store.sessions.create(&r, ttl).await.expect("create");
    let session = r.id.clone();
    let origin = origin.clone();
    let changed = ControlMessage::SessionChanged {
        session: session.clone(),
        origin: origin.clone(),
    };
    let saved = store
        .sessions
        .save_announcing(&r, ttl, &changed)
        .await
        .expect("save");
    assert!(saved.written && saved.announced, "{saved:?}");
    assert_eq!(
        store.sessions.load(&r.id).await.expect("load").as_ref(),
        Some(&r)
    );
    let deliver = ControlMessage::Deliver {
        session: session.clone(),
        message: "{}".into(),
        origin: origin.clone(),
        trace: None,
    };
    store.bus.publish(&deliver).await.expect("publish");
    let ended = ControlMessage::SessionEnded { session, origin };
    let done = store
        .sessions
        .end(&r.id, &*store.events, &ended)
        .await
        .expect("end");
    assert!(done.existed && done.announced, "{done:?}");
    assert_eq!(store.sessions.load(&r.id).await.expect("load"), None);
    [changed, deliver, ended]
}

/// Through one Redis a node alone in the cluster sends nothing that only
/// the others need, from its first heartbeat after the node set is whole (a
/// heartbeat TTL after the first heartbeat on this Redis): its session's
/// change and end, and a `deliver`, are neither logged nor published
/// (counted as unsent), while a server event, which concerns its origin
/// too, goes out. Once a second node joins (its heartbeat), every message
/// goes out again; once it leaves, the first is alone again at its next
/// heartbeat.
#[tokio::test]
async fn a_node_alone_sends_nothing_only_the_others_need() {
    let server = RedisServer::start();
    let store = connect(&server.config()).await.unwrap();
    let con = support::raw(&server).await;
    let unsent = |kind: &str| {
        mcp_cluster_telemetry::metrics::metrics()
            .bus_unsent
            .with_label_values(&[kind])
            .get()
    };
    // The heartbeat TTL: how long after its first heartbeat on this Redis
    // the set counts as whole.
    let ttl = Duration::from_millis(300);
    let alone = NodeId::random();
    assert!(store.nodes.heartbeat(&alone, ttl).await.unwrap());
    let mut rx = store.bus.subscribe();
    // Until then (other members may not have added themselves again yet)
    // everything goes out.
    for expected in life_of(&store, &alone).await {
        assert_eq!(heard(&mut rx).await, expected);
    }
    assert_eq!(log_len(&con).await, 3);
    tokio::time::sleep(ttl).await;
    // The set is whole, but the node has not said that it is alone in it.
    for expected in life_of(&store, &alone).await {
        assert_eq!(heard(&mut rx).await, expected);
    }
    assert_eq!(log_len(&con).await, 6);
    assert!(!store.nodes.heartbeat(&alone, ttl).await.unwrap());

    let counted = ["session_changed", "deliver", "session_ended"].map(unsent);
    life_of(&store, &alone).await;
    assert_eq!(log_len(&con).await, 6, "nothing logged");
    for (kind, before) in ["session_changed", "deliver", "session_ended"]
        .into_iter()
        .zip(counted)
    {
        assert!(unsent(kind) > before, "{kind} counted as unsent");
    }
    let event = ControlMessage::ServerEvent {
        name: "tools_list_changed".into(),
        uri: None,
        origin: alone.clone(),
    };
    store.bus.publish(&event).await.unwrap();
    assert_eq!(heard(&mut rx).await, event, "and nothing before it");
    assert_eq!(log_len(&con).await, 7);

    // A node of an earlier version joins: its heartbeat adds it to the set
    // and leaves `alone` as it was; the set's size is enough.
    let earlier = NodeId::random();
    let members = |command: &'static str| {
        redis::cmd(command)
            .arg("mcp:{nodes}:all")
            .arg(earlier.as_str())
            .clone()
    };
    let added: i64 = members("SADD").query_async(&mut con.clone()).await.unwrap();
    assert_eq!(added, 1);
    for expected in life_of(&store, &alone).await {
        assert_eq!(heard(&mut rx).await, expected);
    }
    assert_eq!(log_len(&con).await, 10);
    let removed: i64 = members("SREM").query_async(&mut con.clone()).await.unwrap();
    assert_eq!(removed, 1);

    // A second node: everything goes out, to it and into the log.
    let other = NodeId::random();
    assert!(store.nodes.heartbeat(&other, ttl).await.unwrap());
    for expected in life_of(&store, &alone).await {
        assert_eq!(heard(&mut rx).await, expected);
    }
    assert_eq!(log_len(&con).await, 13);
    // The first node's heartbeat does not make it alone again.
    assert!(!store.nodes.heartbeat(&alone, ttl).await.unwrap());
    for expected in life_of(&store, &alone).await {
        assert_eq!(heard(&mut rx).await, expected);
    }
    assert_eq!(log_len(&con).await, 16);

    // The other node leaves: alone again from the first node's next
    // heartbeat, and a server event is the first thing heard after a whole
    // life.
    store.nodes.leave(&other).await.unwrap();
    assert!(!store.nodes.heartbeat(&alone, ttl).await.unwrap());
    life_of(&store, &alone).await;
    store.bus.publish(&event).await.unwrap();
    assert_eq!(heard(&mut rx).await, event);
    assert_eq!(log_len(&con).await, 17);

    // Its heartbeat stops: `alone` goes with it (a TTL), and a node that
    // comes back after that announces again until its next heartbeat.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    for expected in life_of(&store, &alone).await {
        assert_eq!(heard(&mut rx).await, expected);
    }
    assert_eq!(log_len(&con).await, 20);
}
