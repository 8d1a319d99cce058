//! The port suite against the in-memory store, plus its time-based retention.

use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_store::memory::{MemoryEventLog, MemorySessionStore, Retention};
use mcp_cluster_store::suite;
use mcp_cluster_store::{EventLog, Position, SessionId, SessionStore, Store, StoreError};

#[tokio::test]
async fn memory_store_passes_the_port_suite() {
    suite::run_all(&Store::memory(Retention::default())).await;
}

#[tokio::test]
async fn memory_store_holds_its_byte_budgets() {
    suite::byte_budgets_hold(&Store::memory(suite::byte_budget_retention())).await;
}

#[tokio::test]
async fn streams_keep_at_most_the_configured_events_and_report_gaps() {
    let log = MemoryEventLog::new(Retention {
        max_events_per_stream: 3,
        ..Retention::default()
    });
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
    let batch = log.read(&s, &stream, Position::START, 100).await;
    assert_eq!(
        batch.unwrap_err(),
        StoreError::Trimmed,
        "events 0 and 1 are gone"
    );
    let batch = log.read(&s, &stream, ids[1].position, 100).await.unwrap();
    assert_eq!(
        batch.events.len(),
        3,
        "resuming right after the trimmed part has no gap"
    );
}

#[tokio::test(start_paused = true)]
async fn closed_streams_and_idle_sessions_expire() {
    let retention = Retention {
        closed_stream_ttl: Duration::from_secs(10),
        ..Retention::default()
    };
    let log = MemoryEventLog::new(retention);
    let s = SessionId::random();
    let stream = log.create_stream(&s, &[]).await.unwrap();
    log.close_stream(&s, &stream, "owner").await.unwrap();
    tokio::time::advance(Duration::from_secs(11)).await;
    log.create_stream(&s, &[]).await.unwrap(); // sweeps
    assert_eq!(
        log.read(&s, &stream, Position::START, 1).await.unwrap_err(),
        StoreError::StreamNotFound
    );
    assert_eq!(log.stream_count(), 1);

    let sessions = MemorySessionStore::new();
    let r = suite::record();
    sessions.create(&r, Duration::from_secs(30)).await.unwrap();
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(
        sessions
            .touch(&r.id, Duration::from_secs(30))
            .await
            .unwrap()
    );
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(
        sessions.load(&r.id).await.unwrap().is_some(),
        "touch renewed the TTL"
    );
    tokio::time::advance(Duration::from_secs(31)).await;
    assert!(
        sessions.load(&r.id).await.unwrap().is_none(),
        "idle session expired"
    );
}

#[tokio::test(start_paused = true)]
async fn the_oldest_closed_streams_go_first_when_the_stream_cap_is_reached() {
    let log = MemoryEventLog::new(Retention {
        max_streams: 10,
        ..Retention::default()
    });
    let s = SessionId::random();
    let mut closed = Vec::new();
    for _ in 0..5 {
        let stream = log.create_stream(&s, &[]).await.unwrap();
        log.close_stream(&s, &stream, "owner").await.unwrap();
        closed.push(stream);
    }
    let mut open = Vec::new();
    for _ in 0..20 {
        // Sweeps forced by the cap are rate-limited.
        tokio::time::advance(Duration::from_millis(300)).await;
        open.push(log.create_stream(&s, &[]).await.unwrap());
    }
    for stream in &closed {
        let err = log.read(&s, stream, Position::START, 1).await.unwrap_err();
        assert_eq!(
            err,
            StoreError::StreamNotFound,
            "closed streams were dropped first"
        );
    }
    for stream in &open {
        assert!(
            log.read(&s, stream, Position::START, 1).await.is_ok(),
            "open streams are kept"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn touched_open_streams_outlive_the_idle_ttl() {
    let retention = Retention {
        idle_stream_ttl: Duration::from_secs(10),
        ..Retention::default()
    };
    let log = MemoryEventLog::new(retention);
    let s = SessionId::random();
    let kept = log.create_stream(&s, &[]).await.unwrap();
    let idle = log.create_stream(&s, &[]).await.unwrap();
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(6)).await;
        log.touch(&s, &kept).await.unwrap();
        log.create_stream(&s, &[]).await.unwrap(); // sweeps
    }
    assert!(log.tail(&s, &kept).await.is_ok(), "touched stream kept");
    assert_eq!(
        log.tail(&s, &idle).await.unwrap_err(),
        StoreError::StreamNotFound
    );
}

#[tokio::test(start_paused = true)]
async fn quota_entries_are_swept_once_they_hold_nothing_and_bounded_in_number() {
    use mcp_cluster_store::memory::MemoryQuotas;
    use mcp_cluster_store::{QuotaKey, QuotaStore, Rate};
    let quotas = MemoryQuotas::with_max_keys(3);
    let minute = Rate {
        limit: 1,
        window: Duration::from_secs(60),
    };
    let lease = Duration::from_secs(30);
    for subject in ["a", "b", "c"] {
        let key = QuotaKey::new("initialize", subject);
        assert!(quotas.hit(&key, 1, minute).await.unwrap().admitted());
        assert!(!quotas.hit(&key, 1, minute).await.unwrap().admitted());
        let key = QuotaKey::new("sessions", subject);
        assert!(
            quotas
                .acquire(&key, "s", 1, lease)
                .await
                .unwrap()
                .admitted()
        );
    }
    assert_eq!(quotas.len(), (3, 3));
    // Full of live subjects: a new one is admitted, but not counted.
    let newcomer = QuotaKey::new("initialize", "d");
    for _ in 0..3 {
        assert!(quotas.hit(&newcomer, 1, minute).await.unwrap().admitted());
    }
    assert!(
        !quotas
            .hit(&QuotaKey::new("initialize", "a"), 1, minute)
            .await
            .unwrap()
            .admitted(),
        "subjects already counted stay counted"
    );
    assert_eq!(quotas.len(), (3, 3));
    // A lease renewed keeps its set; the others lapse, and every entry that
    // holds nothing is swept by the next call that adds one.
    for _ in 0..2 {
        tokio::time::advance(Duration::from_secs(25)).await;
        quotas
            .renew(&QuotaKey::new("sessions", "a"), &["s".into()], lease)
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(quotas.hit(&newcomer, 1, minute).await.unwrap().admitted());
    assert_eq!(quotas.len(), (1, 1));
    assert!(
        !quotas
            .acquire(&QuotaKey::new("sessions", "a"), "t", 1, lease)
            .await
            .unwrap()
            .admitted()
    );
    quotas
        .release(&QuotaKey::new("sessions", "a"), "s")
        .await
        .unwrap();
    assert_eq!(quotas.len(), (1, 0), "a released set goes at once");
}

#[tokio::test(start_paused = true)]
async fn the_session_store_holds_at_most_its_maximum_and_counts_expired_sessions_out() {
    let sessions = MemorySessionStore::with_max_sessions(2);
    let ttl = Duration::from_secs(30);
    let (a, b, c) = (suite::record(), suite::record(), suite::record());
    sessions.create(&a, ttl).await.unwrap();
    sessions.create(&b, ttl).await.unwrap();
    assert_eq!(
        sessions.create(&c, ttl).await.unwrap_err(),
        StoreError::Full
    );
    assert!(
        sessions.load(&c.id).await.unwrap().is_none(),
        "nothing half made"
    );
    assert!(sessions.delete(&a.id).await.unwrap());
    sessions.create(&c, ttl).await.unwrap();
    // Expired, a session no longer counts, swept or not.
    tokio::time::advance(Duration::from_secs(31)).await;
    let d = suite::record();
    sessions.create(&d, ttl).await.unwrap();
    assert!(sessions.load(&d.id).await.unwrap().is_some());
}

#[tokio::test]
async fn a_standalone_stream_is_made_by_its_first_opening_only_while_its_session_lives() {
    let store = Store::memory(Retention::default());
    let r = suite::record();
    let ttl = Duration::from_secs(30);
    store
        .sessions
        .create_with_stream(&r, ttl, &*store.events)
        .await
        .unwrap();
    let standalone = &r.standalone_stream;
    assert_eq!(
        store.events.tail(&r.id, standalone).await.unwrap_err(),
        StoreError::StreamNotFound,
        "no stream before a client opens it"
    );
    let tail = store
        .sessions
        .open_standalone(&r.id, standalone, &*store.events)
        .await
        .unwrap();
    let appended = store
        .events
        .append(&r.id, standalone, Arc::from("{}"))
        .await
        .unwrap();
    // Opened again (a second reader, another GET): the same stream, its
    // event kept.
    let again = store
        .sessions
        .open_standalone(&r.id, standalone, &*store.events)
        .await
        .unwrap();
    assert!(tail < again);
    assert_eq!(again, appended.position);
    // A session that is gone gets no stream.
    let gone = suite::record();
    assert_eq!(
        store
            .sessions
            .open_standalone(&gone.id, &gone.standalone_stream, &*store.events)
            .await
            .unwrap_err(),
        StoreError::StreamNotFound
    );
    assert_eq!(
        store
            .events
            .tail(&gone.id, &gone.standalone_stream)
            .await
            .unwrap_err(),
        StoreError::StreamNotFound
    );
}

/// A node subscribed as itself is not woken for its own messages that only
/// other nodes act on; every other subscription hears them, and a message
/// that concerns its origin reaches the origin too. A node's channel goes
/// with its last receiver.
#[tokio::test]
async fn a_node_does_not_hear_its_own_announcements_on_the_memory_bus() {
    use mcp_cluster_store::memory::MemoryBus;
    use mcp_cluster_store::{ControlBus, ControlMessage, NodeId};
    use tokio::sync::broadcast::error::TryRecvError;

    let bus = MemoryBus::new();
    let (a, b) = (NodeId::random(), NodeId::random());
    let mut own = bus.subscribe_as(&a);
    let mut other = bus.subscribe_as(&b);
    let mut all = bus.subscribe();
    let ended = ControlMessage::SessionEnded {
        session: SessionId::random(),
        origin: a.clone(),
    };
    let event = ControlMessage::ServerEvent {
        name: "tools_list_changed".into(),
        uri: None,
        origin: a.clone(),
    };
    bus.publish(&ended).await.unwrap();
    bus.publish(&event).await.unwrap();
    assert_eq!(own.try_recv().unwrap(), event, "only what concerns it");
    assert_eq!(own.try_recv(), Err(TryRecvError::Empty));
    for rx in [&mut other, &mut all] {
        assert_eq!(rx.try_recv().unwrap(), ended);
        assert_eq!(rx.try_recv().unwrap(), event);
    }

    // A second receiver of the same node shares its channel; once every
    // receiver of `a` is gone, a publish sends it nothing.
    let mut again = bus.subscribe_as(&a);
    drop(own);
    let changed = ControlMessage::SessionChanged {
        session: SessionId::random(),
        origin: b.clone(),
    };
    bus.publish(&changed).await.unwrap();
    assert_eq!(again.try_recv().unwrap(), changed, "b's message reaches a");
    assert_eq!(other.try_recv(), Err(TryRecvError::Empty), "not b's own");
    drop(again);
    bus.publish(&changed).await.unwrap();
    assert_eq!(all.try_recv().unwrap(), changed);
    assert_eq!(all.try_recv().unwrap(), changed);
}
