//! The behavioural suite every store implementation passes.
//!
//! Each function builds what it needs in the given store and panics with a
//! message when the store misbehaves. `mcp-cluster-store/tests/memory_suite.rs` runs
//! it against the in-memory store; the Redis store runs the same functions.
//! Time-based retention is tested per implementation (it needs paused time
//! for memory and real TTLs for Redis).

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::task_store::{AddedInputs, InputLimits, TERMINAL};
use crate::{
    ControlMessage, NodeId, OpenStream, Position, QuotaKey, Rate, RawJson, Saved, SessionId,
    SessionRecord, Store, StoreError, StreamId, Verdict,
};

const TTL: Duration = Duration::from_secs(60);

/// A fresh record for a new random session.
pub fn record() -> SessionRecord {
    SessionRecord {
        id: SessionId::random(),
        protocol_version: Some("2025-11-25".into()),
        client_capabilities: RawJson::of(&json!({"sampling": {}})).unwrap(),
        client_info: RawJson::of(&json!({"name": "suite", "version": "1"})).unwrap(),
        initialized: false,
        log_level: None,
        subscriptions: BTreeSet::new(),
        standalone_stream: StreamId::random(),
        principal: None,
        created_at_ms: 1,
        host: None,
        handover: None,
    }
}

/// Runs every test of the suite.
pub async fn run_all(store: &Store) {
    appended_events_read_back_in_order_once(store).await;
    read_after_a_position_returns_only_later_events(store).await;
    event_ids_are_unique_across_streams(store).await;
    an_append_after_a_lost_event_is_refused(store).await;
    streams_of_another_session_are_not_found(store).await;
    unknown_positions_are_rejected(store).await;
    close_ends_readers_and_wakes_them(store).await;
    delete_session_removes_its_streams(store).await;
    streams_keep_their_request_ids(store).await;
    session_records_round_trip(store).await;
    deleted_sessions_are_gone(store).await;
    announcing_saves_and_ends_do_what_they_say(store).await;
    a_session_is_taken_over_once_and_only_from_its_host(store).await;
    create_refuses_an_existing_session(store).await;
    a_session_created_with_its_stream_has_both(store).await;
    the_standalone_stream_opens_once_and_only_for_a_live_session(store).await;
    subscriptions_are_bounded_and_live_with_the_session(store).await;
    expired_sessions_are_taken_once(store).await;
    store_answers_ping(store).await;
    bus_delivers_published_messages(store).await;
    dead_nodes_are_reported_and_claimed_once(store).await;
    rates_admit_a_burst_then_one_unit_per_interval(store).await;
    rates_hold_under_concurrent_hits(store).await;
    lease_sets_hold_at_most_max_members(store).await;
    leases_lapse_unless_renewed(store).await;
    claims_are_accepted_once_until_they_lapse(store).await;
    the_state_key_ring_rotates_and_forgets_old_keys(store).await;
    tasks_are_created_once_and_read_back(store).await;
    unknown_tasks_are_none_and_refuse_writes(store).await;
    task_puts_change_status_and_record_until_terminal(store).await;
    task_inputs_replace_by_key_and_hold_at_most_max(store).await;
    task_inputs_are_refused_whole_past_their_bytes(store).await;
    task_cancel_sets_the_flag(store).await;
    tasks_expire_with_their_ttl(store).await;
    task_ids_with_braces_and_colons_stay_apart(store).await;
}

/// The retention [`byte_budgets_hold`] needs of the store it runs on: a
/// stream keeps 10 bytes of events; closed streams and finished tasks 30
/// bytes per node, 20 per client and a floor of 8 per client.
pub fn byte_budget_retention() -> crate::memory::Retention {
    let budget = crate::ByteBudget {
        per_node: 30,
        per_client: 20,
        floor: 8,
    };
    crate::memory::Retention {
        max_stream_bytes: 10,
        closed_streams: budget,
        finished_tasks: budget,
        ..crate::memory::Retention::default()
    }
}

/// On a store made with [`byte_budget_retention`]: a stream drops its
/// oldest events past its bytes (keeping the newest, however large);
/// closed streams and finished tasks are charged to their owner, whatever
/// the session: past an owner's share its own oldest go, past the node's
/// budget the oldest of the owners above their floor; an owner at its
/// floor loses nothing to others, and when only such owners are left the
/// store says it is over budget; open streams and running tasks are never
/// dropped.
pub async fn byte_budgets_hold(store: &Store) {
    let log = &store.events;
    let (a, a_too, v, b, c) = (
        SessionId::random(),
        SessionId::random(),
        SessionId::random(),
        SessionId::random(),
        SessionId::random(),
    );
    let stream = log.create_stream(&a, &[]).await.unwrap();
    for _ in 0..3 {
        log.append(&a, &stream, Arc::from("aaaa")).await.unwrap();
    }
    assert_eq!(
        log.read(&a, &stream, Position::START, 10)
            .await
            .unwrap_err(),
        StoreError::Trimmed,
        "12 bytes of events: the oldest went"
    );
    let oldest = log.oldest(&a, &stream).await.unwrap();
    let kept = log.read(&a, &stream, oldest, 10).await.unwrap().events;
    assert_eq!(kept.len(), 2, "8 bytes kept");
    log.append(&a, &stream, Arc::from("a".repeat(15)))
        .await
        .unwrap();
    let oldest = log.oldest(&a, &stream).await.unwrap();
    let kept = log.read(&a, &stream, oldest, 10).await.unwrap().events;
    assert_eq!(kept.len(), 1, "an event over the bytes is kept alone");
    log.delete_session(&a).await.unwrap();

    // Closed streams of 8 bytes each, charged to their owner.
    let closed = |session: SessionId, owner: &'static str| async move {
        let stream = log.create_stream(&session, &[]).await.unwrap();
        log.append(&session, &stream, Arc::from("12345678"))
            .await
            .unwrap();
        log.close_stream(&session, &stream, owner).await.unwrap();
        stream
    };
    let held = |session: &SessionId, stream: &StreamId| {
        let (session, stream) = (session.clone(), stream.clone());
        async move { log.tail(&session, &stream).await.is_ok() }
    };
    let open = log.create_stream(&a, &[]).await.unwrap();
    let a1 = closed(a.clone(), "owner-a").await;
    let a2 = closed(a_too.clone(), "owner-a").await;
    let a3 = closed(a.clone(), "owner-a").await;
    assert!(
        !held(&a, &a1).await,
        "owner a over its 20 bytes in two sessions: its oldest went"
    );
    assert!(held(&a_too, &a2).await && held(&a, &a3).await);
    let v1 = closed(v.clone(), "victim").await;
    assert!(held(&a_too, &a2).await, "24 bytes: within the node's 30");
    let b1 = closed(b.clone(), "owner-b").await;
    assert!(
        !held(&a_too, &a2).await,
        "32 bytes: the oldest of an owner above its floor went"
    );
    assert!(
        held(&v, &v1).await,
        "the victim, older, at its floor, stays"
    );
    assert!(!log.over_budget());
    let c1 = closed(c.clone(), "owner-c").await;
    assert!(
        held(&a, &a3).await && held(&v, &v1).await && held(&b, &b1).await && held(&c, &c1).await,
        "every owner at its floor keeps what it has"
    );
    assert!(log.over_budget(), "32 bytes, nothing to drop: over budget");
    assert!(held(&a, &open).await, "an open stream is never dropped");
    log.delete_session(&a).await.unwrap();
    assert!(!log.over_budget(), "a's session gone: 24 bytes");
    for session in [&a_too, &v, &b, &c] {
        log.delete_session(session).await.unwrap();
    }

    // Finished tasks of 8 bytes each.
    let tasks = &store.tasks;
    let finished = |client: &'static str| async move {
        let id = task_id("budget");
        assert!(
            tasks
                .create(&id, client, "working", "{}", TTL)
                .await
                .unwrap()
        );
        assert!(tasks.put(&id, "completed", "12345678", TTL).await.unwrap());
        id
    };
    let there = |id: String| async move { tasks.get(&id).await.unwrap().is_some() };
    let running = task_id("budget-running");
    assert!(
        tasks
            .create(&running, "a", "working", "{}", TTL)
            .await
            .unwrap()
    );
    let t1 = finished("a").await;
    let t2 = finished("a").await;
    let t3 = finished("a").await;
    assert!(!there(t1).await, "a over its 20 bytes: its oldest went");
    assert!(there(t2.clone()).await && there(t3.clone()).await);
    let tv = finished("victim").await;
    assert!(there(t2.clone()).await, "24 bytes: within the node's 30");
    let t4 = finished("b").await;
    assert!(
        !there(t2).await,
        "32 bytes: the oldest of a client above its floor went"
    );
    assert!(there(tv.clone()).await, "the victim at its floor stays");
    assert!(!tasks.over_budget());
    let t5 = finished("c").await;
    assert!(there(t3).await && there(t4).await && there(t5).await && there(tv).await);
    assert!(
        tasks.over_budget(),
        "32 bytes, nothing to drop: over budget"
    );
    assert!(there(running).await, "a running task is never dropped");
}

/// Appends come back in order, each once.
pub async fn appended_events_read_back_in_order_once(store: &Store) {
    let s = SessionId::random();
    let stream = store.events.create_stream(&s, &[]).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(
            store
                .events
                .append(&s, &stream, Arc::from(format!("{{\"n\":{i}}}")))
                .await
                .unwrap(),
        );
    }
    let batch = store
        .events
        .read(&s, &stream, Position::START, 1000)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 50);
    assert!(!batch.closed);
    for (i, (event, id)) in batch.events.iter().zip(&ids).enumerate() {
        assert_eq!(&*event.data, format!("{{\"n\":{i}}}"));
        assert_eq!(event.position, id.position);
        assert_eq!(id.stream, stream);
    }
    assert!(
        ids.windows(2).all(|w| w[0].position < w[1].position),
        "positions must increase"
    );
}

/// Reading after an event's position returns exactly the later ones.
pub async fn read_after_a_position_returns_only_later_events(store: &Store) {
    let s = SessionId::random();
    let stream = store.events.create_stream(&s, &[]).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(
            store
                .events
                .append(&s, &stream, Arc::from(i.to_string()))
                .await
                .unwrap(),
        );
    }
    let batch = store
        .events
        .read(&s, &stream, ids[3].position, 1000)
        .await
        .unwrap();
    let got: Vec<_> = batch.events.iter().map(|e| e.data.to_string()).collect();
    assert_eq!(got, (4..10).map(|i| i.to_string()).collect::<Vec<_>>());
    let batch = store
        .events
        .read(&s, &stream, ids[3].position, 2)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 2, "max bounds a read");
    assert_eq!(
        store.events.tail(&s, &stream).await.unwrap(),
        ids[9].position
    );
}

/// Event ids differ across streams even at the same position.
pub async fn event_ids_are_unique_across_streams(store: &Store) {
    let s = SessionId::random();
    let a = store.events.create_stream(&s, &[]).await.unwrap();
    let b = store.events.create_stream(&s, &[]).await.unwrap();
    assert_ne!(a, b);
    let ea = store.events.append(&s, &a, Arc::from("x")).await.unwrap();
    let eb = store.events.append(&s, &b, Arc::from("x")).await.unwrap();
    assert_ne!(ea.to_string(), eb.to_string());
}

/// An append that follows the writer's last one goes in; one that follows
/// an event the stream does not hold (lost by the store), or an earlier
/// one than its last (a retry of an append that went in), is refused, and
/// appends nothing.
pub async fn an_append_after_a_lost_event_is_refused(store: &Store) {
    let s = SessionId::random();
    let stream = store.events.create_stream(&s, &[]).await.unwrap();
    let first = store
        .events
        .append_following(&s, &stream, Arc::from("1"), Position::START)
        .await
        .unwrap();
    let second = store
        .events
        .append_following(&s, &stream, Arc::from("2"), first.position)
        .await
        .unwrap();
    assert!(second.position > first.position);
    // A retry of an append that went in (its answer lost) appends nothing.
    let again = store
        .events
        .append_following(&s, &stream, Arc::from("2"), first.position)
        .await;
    assert_eq!(again.unwrap_err(), StoreError::Conflict);
    // As if the store had acknowledged an event and then lost it.
    let lost = Position {
        ms: second.position.ms + 60_000,
        seq: 0,
    };
    let refused = store
        .events
        .append_following(&s, &stream, Arc::from("3"), lost)
        .await;
    assert_eq!(refused.unwrap_err(), StoreError::EventsLost);
    let batch = store
        .events
        .read(&s, &stream, Position::START, 10)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 2, "nothing appended after the gap");
}

/// A stream is invisible from another session.
pub async fn streams_of_another_session_are_not_found(store: &Store) {
    let owner = SessionId::random();
    let other = SessionId::random();
    let stream = store.events.create_stream(&owner, &[]).await.unwrap();
    store
        .events
        .append(&owner, &stream, Arc::from("secret"))
        .await
        .unwrap();
    let err = store
        .events
        .read(&other, &stream, Position::START, 10)
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::StreamNotFound);
    let err = store
        .events
        .append(&other, &stream, Arc::from("x"))
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::StreamNotFound);
    assert!(store.events.subscribe(&other, &stream).await.is_err());
}

/// A position that names no event is rejected, not silently skipped to.
pub async fn unknown_positions_are_rejected(store: &Store) {
    let s = SessionId::random();
    let stream = store.events.create_stream(&s, &[]).await.unwrap();
    let id = store
        .events
        .append(&s, &stream, Arc::from("a"))
        .await
        .unwrap();
    let future = Position {
        ms: id.position.ms + 1_000_000,
        seq: 0,
    };
    let err = store
        .events
        .read(&s, &stream, future, 10)
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::EventNotFound);
}

/// Closing marks the end and wakes subscribers.
pub async fn close_ends_readers_and_wakes_them(store: &Store) {
    let s = SessionId::random();
    let stream = store.events.create_stream(&s, &[]).await.unwrap();
    let mut wake = store.events.subscribe(&s, &stream).await.unwrap();
    let id = store
        .events
        .append(&s, &stream, Arc::from("last"))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), wake.changed())
        .await
        .expect("append wakes");
    store
        .events
        .close_stream(&s, &stream, "owner")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), wake.changed())
        .await
        .expect("close wakes");
    let batch = store
        .events
        .read(&s, &stream, Position::START, 10)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 1);
    assert!(batch.closed);
    let batch = store
        .events
        .read(&s, &stream, id.position, 10)
        .await
        .unwrap();
    assert!(batch.events.is_empty() && batch.closed);
    assert!(
        store
            .events
            .append(&s, &stream, Arc::from("late"))
            .await
            .is_err(),
        "closed streams take no events"
    );
    store
        .events
        .close_stream(&s, &stream, "owner")
        .await
        .unwrap();
}

/// Deleting a session deletes its streams.
pub async fn delete_session_removes_its_streams(store: &Store) {
    let s = SessionId::random();
    let stream = store.events.create_stream(&s, &[]).await.unwrap();
    store
        .events
        .append(&s, &stream, Arc::from("x"))
        .await
        .unwrap();
    store.events.delete_session(&s).await.unwrap();
    let err = store
        .events
        .read(&s, &stream, Position::START, 10)
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::StreamNotFound);
}

/// A stream keeps the ids of the requests it answers (a standalone stream
/// has none), for this session only, until the stream goes.
pub async fn streams_keep_their_request_ids(store: &Store) {
    use mcp_cluster_protocol::RequestId;
    let s = SessionId::random();
    let ids = vec![RequestId::Number(7), RequestId::from("seven")];
    let answering = store.events.create_stream(&s, &ids).await.unwrap();
    let standalone = store.events.create_stream(&s, &[]).await.unwrap();
    assert_eq!(
        store.events.stream_requests(&s, &answering).await.unwrap(),
        ids
    );
    assert!(
        store
            .events
            .stream_requests(&s, &standalone)
            .await
            .unwrap()
            .is_empty()
    );
    let other = SessionId::random();
    assert_eq!(
        store
            .events
            .stream_requests(&other, &answering)
            .await
            .unwrap_err(),
        StoreError::StreamNotFound
    );
    store.events.delete_session(&s).await.unwrap();
    assert_eq!(
        store
            .events
            .stream_requests(&s, &answering)
            .await
            .unwrap_err(),
        StoreError::StreamNotFound
    );
}

/// Records come back as saved.
pub async fn session_records_round_trip(store: &Store) {
    let mut r = record();
    store.sessions.create(&r, TTL).await.unwrap();
    assert_eq!(store.sessions.load(&r.id).await.unwrap().as_ref(), Some(&r));
    assert_eq!(
        store.sessions.load_held(&r.id).await.unwrap().as_ref(),
        Some(&r)
    );
    r.initialized = true;
    r.log_level = Some("debug".into());
    assert!(store.sessions.save(&r, TTL).await.unwrap());
    assert_eq!(store.sessions.load(&r.id).await.unwrap().as_ref(), Some(&r));
    assert!(store.sessions.touch(&r.id, TTL).await.unwrap());
}

/// `create_with_stream` writes the record and its standalone stream, which
/// takes events once opened; a second one under the same id changes nothing
/// and leaves nothing behind.
pub async fn a_session_created_with_its_stream_has_both(store: &Store) {
    let r = record();
    store
        .sessions
        .create_with_stream(&r, TTL, &*store.events)
        .await
        .unwrap();
    assert_eq!(store.sessions.load(&r.id).await.unwrap().as_ref(), Some(&r));
    store
        .sessions
        .open_standalone(&r.id, &r.standalone_stream, &*store.events)
        .await
        .unwrap();
    let event = store
        .events
        .append(&r.id, &r.standalone_stream, Arc::from("first"))
        .await
        .unwrap();
    let batch = store
        .events
        .read(&r.id, &r.standalone_stream, Position::START, 10)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.events[0].position, event.position);
    let mut again = r.clone();
    again.log_level = Some("debug".into());
    let other = StreamId::random();
    // Under the same stream id, then under another one.
    for stream in [r.standalone_stream.clone(), other.clone()] {
        again.standalone_stream = stream;
        let conflict = store
            .sessions
            .create_with_stream(&again, TTL, &*store.events)
            .await;
        assert_eq!(conflict, Err(StoreError::Conflict));
        assert_eq!(store.sessions.load(&r.id).await.unwrap().as_ref(), Some(&r));
    }
    let batch = store
        .events
        .read(&r.id, &r.standalone_stream, Position::START, 10)
        .await
        .unwrap();
    assert_eq!(batch.events.len(), 1, "the stream was not created again");
    let err = store
        .events
        .append(&r.id, &other, Arc::from("x"))
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::StreamNotFound, "no stream left behind");
}

/// Opening a standalone stream makes it once: opened again it keeps its
/// events, and a closed one stays closed. A session that is gone gets no
/// stream.
pub async fn the_standalone_stream_opens_once_and_only_for_a_live_session(store: &Store) {
    let (sessions, events) = (&store.sessions, &*store.events);
    let r = record();
    let stream = &r.standalone_stream;
    sessions.create_with_stream(&r, TTL, events).await.unwrap();
    assert_eq!(
        sessions.open_standalone(&r.id, stream, events).await,
        Ok(Position::START),
        "opened empty"
    );
    let first = events
        .append(&r.id, stream, Arc::from("first"))
        .await
        .unwrap();
    assert_eq!(
        sessions.open_standalone(&r.id, stream, events).await,
        Ok(first.position),
        "its tail"
    );
    assert_eq!(events.tail(&r.id, stream).await.unwrap(), first.position);
    events.close_stream(&r.id, stream, "owner").await.unwrap();
    assert_eq!(
        sessions.open_standalone(&r.id, stream, events).await,
        Ok(first.position)
    );
    assert_eq!(
        events.append(&r.id, stream, Arc::from("x")).await,
        Err(StoreError::StreamNotFound),
        "a closed stream is not opened again"
    );
    let batch = events
        .read(&r.id, stream, Position::START, 10)
        .await
        .unwrap();
    assert!(batch.closed);
    assert_eq!(batch.events.len(), 1);

    // Ended as the runtime ends a session: the record, then its streams.
    let gone = record();
    sessions
        .create_with_stream(&gone, TTL, events)
        .await
        .unwrap();
    assert!(sessions.delete(&gone.id).await.unwrap());
    events.delete_session(&gone.id).await.unwrap();
    assert_eq!(
        sessions
            .open_standalone(&gone.id, &gone.standalone_stream, events)
            .await,
        Err(StoreError::StreamNotFound)
    );
    assert_eq!(
        events.tail(&gone.id, &gone.standalone_stream).await,
        Err(StoreError::StreamNotFound),
        "no stream was made for it"
    );
}

/// Subscriptions change only through subscribe / unsubscribe, never beyond
/// the maximum, and go with the session.
pub async fn subscriptions_are_bounded_and_live_with_the_session(store: &Store) {
    use crate::Subscribed;
    let mut r = record();
    let sessions = &store.sessions;
    sessions.create(&r, TTL).await.unwrap();
    assert_eq!(
        sessions.subscribe(&r.id, "test://a", 2).await.unwrap(),
        Subscribed::Added
    );
    assert_eq!(
        sessions.subscribe(&r.id, "test://a", 2).await.unwrap(),
        Subscribed::AlreadySubscribed
    );
    assert_eq!(
        sessions.subscribe(&r.id, "test://b", 2).await.unwrap(),
        Subscribed::Added
    );
    assert_eq!(
        sessions.subscribe(&r.id, "test://c", 2).await.unwrap(),
        Subscribed::Full
    );
    let loaded = sessions.load(&r.id).await.unwrap().unwrap();
    let expected: BTreeSet<String> = ["test://a".into(), "test://b".into()].into();
    assert_eq!(loaded.subscriptions, expected);
    // A save carries no subscriptions: it neither drops nor adds any.
    r.log_level = Some("info".into());
    r.subscriptions = ["test://zzz".to_owned()].into();
    assert!(sessions.save(&r, TTL).await.unwrap());
    let loaded = sessions.load(&r.id).await.unwrap().unwrap();
    assert_eq!(loaded.subscriptions, expected);
    assert_eq!(loaded.log_level.as_deref(), Some("info"));
    // Removing one frees room; removing one not held changes nothing.
    assert!(sessions.unsubscribe(&r.id, "test://a").await.unwrap());
    assert!(sessions.unsubscribe(&r.id, "test://never").await.unwrap());
    assert_eq!(
        sessions.subscribe(&r.id, "test://c", 2).await.unwrap(),
        Subscribed::Added
    );
    assert!(sessions.touch(&r.id, TTL).await.unwrap());
    let loaded = sessions.load(&r.id).await.unwrap().unwrap();
    let expected: BTreeSet<String> = ["test://b".into(), "test://c".into()].into();
    assert_eq!(loaded.subscriptions, expected);
    // Gone with the session, and not recreated by a late subscribe.
    assert!(sessions.delete(&r.id).await.unwrap());
    assert_eq!(
        sessions.subscribe(&r.id, "test://d", 2).await.unwrap(),
        Subscribed::SessionGone
    );
    assert!(!sessions.unsubscribe(&r.id, "test://b").await.unwrap());
    sessions.create(&r, TTL).await.unwrap();
    let reborn = sessions.load(&r.id).await.unwrap().unwrap();
    assert!(
        reborn.subscriptions.is_empty(),
        "{:?}",
        reborn.subscriptions
    );
    assert!(sessions.delete(&r.id).await.unwrap());
}

/// An expired session is handed out once (to one of two concurrent
/// callers); live and deleted sessions are not.
pub async fn expired_sessions_are_taken_once(store: &Store) {
    const SHORT: Duration = Duration::from_millis(300);
    let sessions = &store.sessions;
    let expiring = record();
    let live = record();
    let deleted = record();
    sessions.create(&expiring, SHORT).await.unwrap();
    sessions.create(&live, TTL).await.unwrap();
    sessions.create(&deleted, SHORT).await.unwrap();
    assert!(sessions.delete(&deleted.id).await.unwrap());
    tokio::time::sleep(SHORT * 2).await;
    assert_eq!(sessions.load(&expiring.id).await.unwrap(), None);
    let (a, b) = tokio::join!(sessions.take_expired(1000), sessions.take_expired(1000));
    let taken: Vec<SessionId> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    assert_eq!(
        taken.iter().filter(|id| **id == expiring.id).count(),
        1,
        "{taken:?}"
    );
    assert!(!taken.contains(&live.id), "{taken:?}");
    assert!(!taken.contains(&deleted.id), "{taken:?}");
    assert!(
        !sessions
            .take_expired(1000)
            .await
            .unwrap()
            .contains(&expiring.id)
    );
    assert!(sessions.load(&live.id).await.unwrap().is_some());
    assert!(sessions.delete(&live.id).await.unwrap());
}

/// Deleted sessions stay gone: save and touch do not recreate them; the
/// store remembers that they were ended.
pub async fn deleted_sessions_are_gone(store: &Store) {
    let r = record();
    store.sessions.create(&r, TTL).await.unwrap();
    assert!(!store.sessions.ended(&r.id).await.unwrap());
    assert!(store.sessions.delete(&r.id).await.unwrap());
    assert!(store.sessions.ended(&r.id).await.unwrap());
    assert!(!store.sessions.ended(&record().id).await.unwrap());
    assert!(!store.sessions.delete(&r.id).await.unwrap());
    assert_eq!(store.sessions.load(&r.id).await.unwrap(), None);
    assert!(!store.sessions.save(&r, TTL).await.unwrap());
    assert!(!store.sessions.touch(&r.id, TTL).await.unwrap());
    assert_eq!(store.sessions.load(&r.id).await.unwrap(), None);
}

/// A save that announces and an end say what they did, and did it: the
/// record is written (a gone session's is not, nor announced); an end ends
/// the session, and one that took its streams left none; the bus carries
/// what the store says it announced, once each and in order, and nothing
/// else.
pub async fn announcing_saves_and_ends_do_what_they_say(store: &Store) {
    let mut rx = store.bus.subscribe();
    let origin = NodeId::random();
    let mut r = record();
    store.sessions.create(&r, TTL).await.unwrap();
    r.initialized = true;
    let changed = ControlMessage::SessionChanged {
        session: r.id.clone(),
        origin: origin.clone(),
    };
    let saved = store
        .sessions
        .save_announcing(&r, TTL, &changed)
        .await
        .unwrap();
    assert!(saved.written);
    assert_eq!(store.sessions.load(&r.id).await.unwrap().as_ref(), Some(&r));

    let stream = store.events.create_stream(&r.id, &[]).await.unwrap();
    store
        .events
        .append(&r.id, &stream, Arc::from("x"))
        .await
        .unwrap();
    let ended = ControlMessage::SessionEnded {
        session: r.id.clone(),
        origin: origin.clone(),
    };
    let done = store
        .sessions
        .end(&r.id, &*store.events, &ended)
        .await
        .unwrap();
    assert!(done.existed);
    assert!(store.sessions.ended(&r.id).await.unwrap());
    assert_eq!(store.sessions.load(&r.id).await.unwrap(), None);
    if done.streams_deleted {
        let err = store
            .events
            .read(&r.id, &stream, Position::START, 10)
            .await
            .unwrap_err();
        assert_eq!(err, StoreError::StreamNotFound);
    }

    let again = store
        .sessions
        .save_announcing(&r, TTL, &changed)
        .await
        .unwrap();
    assert_eq!(
        again,
        Saved {
            written: false,
            announced: false
        },
        "a gone session is neither written nor announced"
    );
    let twice = store
        .sessions
        .end(&r.id, &*store.events, &ended)
        .await
        .unwrap();
    assert!(!twice.existed);

    // A message of the test's own goes last: everything announced before
    // it has arrived when it does.
    let last = ControlMessage::ServerEvent {
        name: "last".into(),
        uri: None,
        origin: origin.clone(),
    };
    store.bus.publish(&last).await.unwrap();
    let expected: Vec<ControlMessage> = [
        (saved.announced, &changed),
        (done.announced, &ended),
        (twice.announced, &ended),
        (true, &last),
    ]
    .into_iter()
    .filter(|(announced, _)| *announced)
    .map(|(_, m)| m.clone())
    .collect();
    let got = heard_from(&mut rx, &origin, |got| got.last() == Some(&last)).await;
    assert_eq!(got, expected);
}

/// The messages `rx` receives from `origin` (other tests, or nodes, may
/// publish on the same bus), until `enough` says so; each must arrive
/// within 5 s.
async fn heard_from(
    rx: &mut tokio::sync::broadcast::Receiver<ControlMessage>,
    origin: &NodeId,
    enough: impl Fn(&[ControlMessage]) -> bool,
) -> Vec<ControlMessage> {
    let mut got = Vec::new();
    while !enough(&got) {
        let m = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("message arrives")
            .unwrap();
        if m.origin() == origin {
            got.push(m);
        }
    }
    got
}

/// `rehost` replaces the record only while its host is the one named:
/// of two nodes that found the host gone, the second changes nothing; the
/// subscriptions stay; a gone session is not brought back.
pub async fn a_session_is_taken_over_once_and_only_from_its_host(store: &Store) {
    let mut r = record();
    r.host = Some("node-a".into());
    r.handover = Some(crate::RawJson::of(&json!({"state": 1})).unwrap());
    store.sessions.create(&r, TTL).await.unwrap();
    assert_eq!(
        store
            .sessions
            .subscribe(&r.id, "file:///kept", 4)
            .await
            .unwrap(),
        crate::Subscribed::Added
    );
    let mut by_b = r.clone();
    by_b.host = Some("node-b".into());
    let mut by_c = r.clone();
    by_c.host = Some("node-c".into());
    assert!(!store.sessions.rehost(&by_b, "node-x", TTL).await.unwrap());
    assert!(store.sessions.rehost(&by_b, "node-a", TTL).await.unwrap());
    assert!(!store.sessions.rehost(&by_c, "node-a", TTL).await.unwrap());
    let stored = store.sessions.load(&r.id).await.unwrap().unwrap();
    assert_eq!(stored.host.as_deref(), Some("node-b"));
    assert_eq!(stored.handover, r.handover);
    assert!(stored.subscriptions.contains("file:///kept"));
    assert!(store.sessions.delete(&r.id).await.unwrap());
    assert!(!store.sessions.rehost(&by_c, "node-b", TTL).await.unwrap());
    assert_eq!(store.sessions.load(&r.id).await.unwrap(), None);
}

/// Creating over a live session is a conflict.
pub async fn create_refuses_an_existing_session(store: &Store) {
    let r = record();
    store.sessions.create(&r, TTL).await.unwrap();
    assert_eq!(
        store.sessions.create(&r, TTL).await.unwrap_err(),
        StoreError::Conflict
    );
}

/// A reachable store answers ping.
pub async fn store_answers_ping(store: &Store) {
    store.sessions.ping().await.unwrap();
}

/// A subscriber receives what is published after it subscribed, in order.
pub async fn bus_delivers_published_messages(store: &Store) {
    let mut rx = store.bus.subscribe();
    let origin = NodeId::random();
    let session = SessionId::random();
    let sent = vec![
        ControlMessage::SessionChanged {
            session: session.clone(),
            origin: origin.clone(),
        },
        ControlMessage::Deliver {
            session: session.clone(),
            message: "{}".into(),
            origin: origin.clone(),
            trace: None,
        },
        // The trace context travels with the message.
        ControlMessage::Kick {
            session: session.clone(),
            stream: StreamId::random(),
            origin: origin.clone(),
            trace: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        },
        ControlMessage::ServerEvent {
            name: "resource_updated".into(),
            uri: Some("test://x".into()),
            origin: origin.clone(),
        },
    ];
    for m in &sent {
        store.bus.publish(m).await.unwrap();
    }
    let got = heard_from(&mut rx, &origin, |got| got.len() == sent.len()).await;
    assert_eq!(got, sent);
}

/// Whether a heartbeat of `node` made it a member.
async fn joins(store: &Store, node: &NodeId, ttl: Duration) -> bool {
    store.nodes.heartbeat(node, ttl).await.unwrap()
}

/// A node whose heartbeat expired is reported dead; its open streams go to
/// exactly one claimer; closed streams are not among them. A heartbeat
/// says when it made the node a member: the first, and the first after the
/// node was claimed or left, not the others.
pub async fn dead_nodes_are_reported_and_claimed_once(store: &Store) {
    let dead = NodeId::random();
    let alive = NodeId::random();
    assert!(
        joins(store, &dead, Duration::from_millis(300)).await,
        "a first heartbeat joins"
    );
    assert!(joins(store, &alive, Duration::from_secs(60)).await);
    assert!(
        !joins(store, &alive, Duration::from_secs(60)).await,
        "a member's heartbeat does not join again"
    );
    let open = OpenStream {
        session: SessionId::random(),
        stream: StreamId::random(),
        requests: vec![
            mcp_cluster_protocol::RequestId::Number(1),
            mcp_cluster_protocol::RequestId::from("a"),
        ],
    };
    let closed = OpenStream {
        requests: vec![],
        stream: StreamId::random(),
        ..open.clone()
    };
    store.nodes.open_stream(&dead, &open).await.unwrap();
    store.nodes.open_stream(&dead, &closed).await.unwrap();
    store
        .nodes
        .close_stream(&dead, &closed.stream)
        .await
        .unwrap();
    assert!(
        !store.nodes.dead_nodes().await.unwrap().contains(&dead),
        "not dead yet"
    );
    assert!(
        store.nodes.alive(&dead).await.unwrap(),
        "alive until it lapses"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let dead_now = store.nodes.dead_nodes().await.unwrap();
    assert!(dead_now.contains(&dead));
    assert!(!dead_now.contains(&alive));
    assert!(
        !store.nodes.alive(&dead).await.unwrap(),
        "its heartbeat lapsed"
    );
    assert!(store.nodes.alive(&alive).await.unwrap());
    assert!(
        !store.nodes.alive(&NodeId::random()).await.unwrap(),
        "a node never seen is not alive"
    );
    assert!(
        store.nodes.claim_orphans(&alive).await.unwrap().is_empty(),
        "live nodes cannot be claimed"
    );
    let (first, second) = tokio::join!(
        store.nodes.claim_orphans(&dead),
        store.nodes.claim_orphans(&dead)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    let claimed = if first.is_empty() {
        second
    } else {
        assert!(second.is_empty(), "claimed twice");
        first
    };
    assert_eq!(claimed, vec![open]);
    assert!(
        !store.nodes.dead_nodes().await.unwrap().contains(&dead),
        "forgotten once claimed"
    );
    assert!(
        joins(store, &dead, Duration::from_millis(300)).await,
        "a claimed node that beats again joins again"
    );
    store.nodes.leave(&alive).await.unwrap();
    assert!(
        !store.nodes.alive(&alive).await.unwrap(),
        "a node that left"
    );
    assert!(
        joins(store, &alive, Duration::from_secs(60)).await,
        "so does one that left"
    );
    store.nodes.leave(&alive).await.unwrap();
    store.nodes.leave(&dead).await.unwrap();
}

/// A subject no other test (or run) uses, with the characters that matter
/// to key building (braces, separators).
fn subject(tag: &str) -> std::sync::Arc<str> {
    format!("https://idp.example/{{x}}#{tag}:{}", SessionId::random()).into()
}

fn limited(verdict: Verdict) -> Duration {
    match verdict {
        Verdict::Limited { retry_after } => retry_after,
        Verdict::Admitted => panic!("admitted beyond the quota"),
    }
}

/// A rate admits a burst of `limit`, then refuses (counting nothing) with
/// the time until one more unit fits; a cost above what is left is refused
/// whole; subjects and quotas are counted apart; after the interval one
/// more unit fits.
pub async fn rates_admit_a_burst_then_one_unit_per_interval(store: &Store) {
    let quotas = &store.quotas;
    let minute = Rate {
        limit: 4,
        window: Duration::from_secs(60),
    };
    let key = QuotaKey::new("suite_rate", subject("burst"));
    assert_eq!(
        quotas.hit(&key, 3, minute).await.unwrap(),
        Verdict::Admitted
    );
    let wait = limited(quotas.hit(&key, 2, minute).await.unwrap());
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(15),
        "{wait:?}"
    );
    assert_eq!(
        quotas.hit(&key, 1, minute).await.unwrap(),
        Verdict::Admitted
    );
    let wait = limited(quotas.hit(&key, 1, minute).await.unwrap());
    assert!(
        wait > Duration::from_secs(10) && wait <= Duration::from_secs(15),
        "{wait:?}"
    );
    // Never more than the limit at once, even on a fresh subject.
    let fresh = QuotaKey::new("suite_rate", subject("fresh"));
    assert_eq!(
        limited(quotas.hit(&fresh, 5, minute).await.unwrap()),
        minute.window
    );
    assert!(quotas.hit(&fresh, 4, minute).await.unwrap().admitted());
    // Another quota of the same subject is counted apart.
    let other = QuotaKey::new("suite_other", key.subject.clone());
    assert!(quotas.hit(&other, 1, minute).await.unwrap().admitted());

    let fast = Rate {
        limit: 2,
        window: Duration::from_millis(600),
    };
    let key = QuotaKey::new("suite_rate", subject("refill"));
    assert!(quotas.hit(&key, 1, fast).await.unwrap().admitted());
    assert!(quotas.hit(&key, 1, fast).await.unwrap().admitted());
    let wait = limited(quotas.hit(&key, 1, fast).await.unwrap());
    assert!(wait <= Duration::from_millis(300), "{wait:?}");
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
    assert!(quotas.hit(&key, 1, fast).await.unwrap().admitted());
    assert!(!quotas.hit(&key, 1, fast).await.unwrap().admitted());
}

/// Concurrent hits on one subject admit exactly the limit.
pub async fn rates_hold_under_concurrent_hits(store: &Store) {
    let rate = Rate {
        limit: 10,
        window: Duration::from_secs(60),
    };
    let key = QuotaKey::new("suite_rate", subject("race"));
    let mut hits = tokio::task::JoinSet::new();
    for _ in 0..25 {
        let quotas = Arc::clone(&store.quotas);
        let key = key.clone();
        hits.spawn(async move { quotas.hit(&key, 1, rate).await.unwrap() });
    }
    let admitted = hits
        .join_all()
        .await
        .into_iter()
        .filter(|v| v.admitted())
        .count();
    assert_eq!(admitted, 10);
}

/// A lease set holds at most `max` members; a member already held is
/// admitted again; a released member frees its slot; what one subject
/// holds does not count for another.
pub async fn lease_sets_hold_at_most_max_members(store: &Store) {
    let quotas = &store.quotas;
    let lease = Duration::from_secs(60);
    let key = QuotaKey::new("suite_lease", subject("max"));
    assert!(
        quotas
            .acquire(&key, "a", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    assert!(
        quotas
            .acquire(&key, "b", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    let wait = limited(quotas.acquire(&key, "c", 2, lease).await.unwrap());
    assert!(wait > Duration::from_secs(50) && wait <= lease, "{wait:?}");
    assert!(
        quotas
            .acquire(&key, "a", 2, lease)
            .await
            .unwrap()
            .admitted(),
        "a member already held is admitted again"
    );
    let other = QuotaKey::new("suite_lease", subject("other"));
    assert!(
        quotas
            .acquire(&other, "c", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    quotas.release(&key, "a").await.unwrap();
    quotas.release(&key, "never held").await.unwrap();
    assert!(
        quotas
            .acquire(&key, "c", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    assert!(
        !quotas
            .acquire(&key, "d", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    for member in ["b", "c"] {
        quotas.release(&key, member).await.unwrap();
    }
    quotas.release(&other, "c").await.unwrap();
    assert!(
        !quotas
            .acquire(&key, "z", 0, lease)
            .await
            .unwrap()
            .admitted(),
        "a set of at most 0 admits nothing"
    );
}

/// Members lapse with their lease unless renewed (a holder that died frees
/// its slots); a renewal brings back a member that lapsed.
pub async fn leases_lapse_unless_renewed(store: &Store) {
    let quotas = &store.quotas;
    let lease = Duration::from_millis(500);
    let key = QuotaKey::new("suite_lease", subject("lapse"));
    assert!(
        quotas
            .acquire(&key, "kept", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    assert!(
        quotas
            .acquire(&key, "dead", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    assert!(
        !quotas
            .acquire(&key, "new", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    quotas.renew(&key, &["kept".into()], lease).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        quotas
            .acquire(&key, "new", 2, lease)
            .await
            .unwrap()
            .admitted(),
        "the member nobody renewed lapsed"
    );
    assert!(
        !quotas
            .acquire(&key, "newer", 2, lease)
            .await
            .unwrap()
            .admitted(),
        "the renewed member is still held"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    quotas.renew(&key, &["back".into()], lease).await.unwrap();
    assert!(
        quotas
            .acquire(&key, "one", 2, lease)
            .await
            .unwrap()
            .admitted()
    );
    assert!(
        !quotas
            .acquire(&key, "two", 2, lease)
            .await
            .unwrap()
            .admitted(),
        "a renewal holds its member even after it lapsed"
    );
}

/// A claim is accepted once, and again once its time is over.
pub async fn claims_are_accepted_once_until_they_lapse(store: &Store) {
    let key = QuotaKey::new("request_state", format!("suite-{}", uuid::Uuid::new_v4()));
    let ttl = Duration::from_millis(300);
    assert!(store.quotas.claim_once(&key, ttl).await.unwrap());
    assert!(!store.quotas.claim_once(&key, ttl).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(store.quotas.claim_once(&key, ttl).await.unwrap());
}

/// The key ring: the first call makes a key; later calls return it until
/// it is due for rotation, then add a new one first; keys older than
/// rotate + keep go, but never the newest.
pub async fn the_state_key_ring_rotates_and_forgets_old_keys(store: &Store) {
    let rotate = Duration::from_millis(400);
    let keep = Duration::from_millis(400);
    let nodes = &store.nodes;
    let first = nodes.state_keys("k1:one", rotate, keep).await.unwrap();
    assert_eq!(first, vec!["k1:one".to_owned()]);
    let again = nodes.state_keys("k2:two", rotate, keep).await.unwrap();
    assert_eq!(again, first, "not due yet: the offered key is not added");
    tokio::time::sleep(Duration::from_millis(450)).await;
    let rotated = nodes.state_keys("k3:three", rotate, keep).await.unwrap();
    assert_eq!(rotated, vec!["k3:three".to_owned(), "k1:one".to_owned()]);
    tokio::time::sleep(Duration::from_millis(450)).await;
    // k1 is 900 ms old (> rotate + keep): gone; k3 is due: k4 comes first.
    let later = nodes.state_keys("k4:four", rotate, keep).await.unwrap();
    assert_eq!(later, vec!["k4:four".to_owned(), "k3:three".to_owned()]);
}

/// A task id no other test (or run) uses.
fn task_id(tag: &str) -> String {
    format!("suite-{tag}-{}", uuid::Uuid::new_v4())
}

/// `(key, answer)` pairs, owned.
fn answers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A task as the suite compares it: with its answers, read one by one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    status: String,
    record: String,
    inputs: Vec<(String, String)>,
    cancelled: bool,
}

/// The task, its answers sorted by key (their order is the store's).
async fn task(store: &Store, id: &str) -> Option<Held> {
    let task = store.tasks.get(id).await.unwrap()?;
    let mut inputs = Vec::new();
    for key in task.answered {
        let answer = store.tasks.answer(id, &key).await.unwrap();
        inputs.push((key, answer.expect("an answered key has its answer")));
    }
    inputs.sort();
    Some(Held {
        status: task.status,
        record: task.record,
        inputs,
        cancelled: task.cancelled,
    })
}

/// Input limits of `max` keys and no byte bound.
fn limits(max: usize) -> InputLimits {
    InputLimits {
        max_keys: max,
        max_bytes: u64::MAX,
    }
}

/// A task as just created: no answers, not cancelled.
fn fresh(status: &str, record: &str) -> Held {
    Held {
        status: status.to_owned(),
        record: record.to_owned(),
        inputs: Vec::new(),
        cancelled: false,
    }
}

/// A created task reads back as written; creating it again is refused and
/// changes nothing.
pub async fn tasks_are_created_once_and_read_back(store: &Store) {
    let id = task_id("create");
    let record = r#"{"status":"working","n":1}"#;
    assert!(
        store
            .tasks
            .create(&id, "client", "working", record, TTL)
            .await
            .unwrap()
    );
    assert_eq!(task(store, &id).await, Some(fresh("working", record)));
    assert!(
        !store
            .tasks
            .create(&id, "client", "input_required", "{}", TTL)
            .await
            .unwrap(),
        "a task is created once"
    );
    assert_eq!(
        task(store, &id).await,
        Some(fresh("working", record)),
        "a refused create changes nothing"
    );
}

/// A task never created is `None`, and every write to it is refused
/// without creating it.
pub async fn unknown_tasks_are_none_and_refuse_writes(store: &Store) {
    let id = task_id("unknown");
    assert_eq!(store.tasks.get(&id).await.unwrap(), None);
    assert!(!store.tasks.put(&id, "working", "{}", TTL).await.unwrap());
    assert_eq!(
        store
            .tasks
            .add_inputs(&id, &answers(&[("q", "1")]), limits(10))
            .await
            .unwrap(),
        AddedInputs::Gone
    );
    assert!(!store.tasks.cancel(&id).await.unwrap());
    assert_eq!(
        store.tasks.get(&id).await.unwrap(),
        None,
        "refused writes create nothing"
    );
}

/// `put` replaces status and record (keeping answers and the cancel flag)
/// until a terminal status is written; after that it is refused and
/// nothing changes, whichever terminal status it was.
pub async fn task_puts_change_status_and_record_until_terminal(store: &Store) {
    for terminal in TERMINAL {
        let id = task_id("put");
        assert!(
            store
                .tasks
                .create(&id, "client", "working", "{}", TTL)
                .await
                .unwrap()
        );
        assert!(
            store
                .tasks
                .add_inputs(&id, &answers(&[("q", "\"yes\"")]), limits(10))
                .await
                .unwrap()
                == AddedInputs::Added
        );
        assert!(
            store
                .tasks
                .put(&id, "input_required", r#"{"n":2}"#, TTL)
                .await
                .unwrap()
        );
        assert_eq!(
            task(store, &id).await,
            Some(Held {
                status: "input_required".into(),
                record: r#"{"n":2}"#.into(),
                inputs: answers(&[("q", "\"yes\"")]),
                cancelled: false,
            }),
            "put replaced status and record, kept the answers"
        );
        let last = format!(r#"{{"status":"{terminal}"}}"#);
        assert!(store.tasks.put(&id, terminal, &last, TTL).await.unwrap());
        let ended = task(store, &id).await.unwrap();
        assert_eq!(
            (ended.status.as_str(), ended.record.as_str()),
            (terminal, &*last)
        );
        assert!(
            !store.tasks.put(&id, "working", "{}", TTL).await.unwrap(),
            "{terminal} is terminal"
        );
        assert!(
            !store.tasks.put(&id, terminal, "{}", TTL).await.unwrap(),
            "{terminal} is terminal, even for itself"
        );
        assert_eq!(
            task(store, &id).await,
            Some(ended),
            "a refused put changes nothing"
        );
    }
}

/// Answers are added by key: a key given again replaces its answer (even
/// when `max` keys are held, and within one call the last one wins); new
/// keys beyond `max` held are dropped; the task is still answered `true`.
pub async fn task_inputs_replace_by_key_and_hold_at_most_max(store: &Store) {
    let id = task_id("inputs");
    assert!(
        store
            .tasks
            .create(&id, "client", "input_required", "{}", TTL)
            .await
            .unwrap()
    );
    let add = |inputs: Vec<(String, String)>| {
        let id = id.clone();
        async move {
            store
                .tasks
                .add_inputs(&id, &inputs, limits(3))
                .await
                .unwrap()
                == AddedInputs::Added
        }
    };
    assert!(add(answers(&[("a", "1"), ("b", "2")])).await);
    assert!(add(answers(&[("a", "10"), ("c", "3"), ("d", "4"), ("e", "5")])).await);
    assert_eq!(
        task(store, &id).await.unwrap().inputs,
        answers(&[("a", "10"), ("b", "2"), ("c", "3")]),
        "a replaced, c added, d and e beyond max dropped"
    );
    assert!(add(answers(&[("d", "4"), ("b", "20"), ("b", "21")])).await);
    assert_eq!(
        task(store, &id).await.unwrap().inputs,
        answers(&[("a", "10"), ("b", "21"), ("c", "3")]),
        "at max, held keys are still replaced"
    );
    assert!(add(Vec::new()).await, "no answers: nothing to add");
    assert!(
        store
            .tasks
            .add_inputs(&id, &answers(&[("f", "6")]), limits(0))
            .await
            .unwrap()
            == AddedInputs::Added
    );
    let held = task(store, &id).await.unwrap();
    assert_eq!(held.inputs.len(), 3, "{:?}", held.inputs);
    assert_eq!(
        (held.status.as_str(), held.record.as_str(), held.cancelled),
        ("input_required", "{}", false),
        "answers leave the rest of the task alone"
    );
}

/// An update that would take a task's answers past `max_bytes` is
/// refused whole: nothing of it is held; replacing an answer by a smaller
/// one makes room.
pub async fn task_inputs_are_refused_whole_past_their_bytes(store: &Store) {
    let id = task_id("input-bytes");
    assert!(
        store
            .tasks
            .create(&id, "client", "input_required", "{}", TTL)
            .await
            .unwrap()
    );
    let limits = InputLimits {
        max_keys: 10,
        max_bytes: 10,
    };
    let add = |inputs: Vec<(String, String)>| {
        let id = id.clone();
        async move { store.tasks.add_inputs(&id, &inputs, limits).await.unwrap() }
    };
    assert_eq!(add(answers(&[("a", "123456")])).await, AddedInputs::Added);
    assert_eq!(
        add(answers(&[("b", "1"), ("c", "12345")])).await,
        AddedInputs::TooLarge
    );
    assert_eq!(
        task(store, &id).await.unwrap().inputs,
        answers(&[("a", "123456")]),
        "nothing of a refused update is held"
    );
    assert_eq!(
        add(answers(&[("a", "1"), ("c", "12345")])).await,
        AddedInputs::Added
    );
    assert_eq!(
        task(store, &id).await.unwrap().inputs,
        answers(&[("a", "1"), ("c", "12345")])
    );
}

/// `cancel` sets the flag, keeps the rest, and works on any live task,
/// ended ones included.
pub async fn task_cancel_sets_the_flag(store: &Store) {
    let id = task_id("cancel");
    assert!(
        store
            .tasks
            .create(&id, "client", "working", "{}", TTL)
            .await
            .unwrap()
    );
    assert!(store.tasks.cancel(&id).await.unwrap());
    assert_eq!(
        task(store, &id).await,
        Some(Held {
            cancelled: true,
            ..fresh("working", "{}")
        })
    );
    assert!(store.tasks.cancel(&id).await.unwrap(), "cancel again");
    assert!(
        store
            .tasks
            .put(&id, "cancelled", r#"{"why":"asked"}"#, TTL)
            .await
            .unwrap(),
        "the flag does not stop the owner from writing"
    );
    assert_eq!(
        task(store, &id).await,
        Some(Held {
            cancelled: true,
            ..fresh("cancelled", r#"{"why":"asked"}"#)
        }),
        "put keeps the flag"
    );
    let done = task_id("cancel-done");
    assert!(
        store
            .tasks
            .create(&done, "client", "completed", "{}", TTL)
            .await
            .unwrap()
    );
    assert!(store.tasks.cancel(&done).await.unwrap());
    assert!(task(store, &done).await.unwrap().cancelled);
}

/// A task (answers included) is gone `ttl` after its create or last put,
/// whatever was answered or cancelled since; a put renews the TTL; once
/// gone, writes are refused and the id may be created afresh.
pub async fn tasks_expire_with_their_ttl(store: &Store) {
    let ttl = Duration::from_millis(300);
    let short = task_id("expire");
    let renewed = task_id("renew");
    for id in [&short, &renewed] {
        assert!(
            store
                .tasks
                .create(id, "client", "working", "{}", ttl)
                .await
                .unwrap()
        );
        assert!(
            store
                .tasks
                .add_inputs(id, &answers(&[("q", "1")]), limits(10))
                .await
                .unwrap()
                == AddedInputs::Added
        );
    }
    assert!(store.tasks.cancel(&short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        store
            .tasks
            .put(
                &renewed,
                "working",
                r#"{"n":2}"#,
                Duration::from_millis(500)
            )
            .await
            .unwrap()
    );
    // `short` expired at 300 ms, `renewed` expires at 650 ms.
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(store.tasks.get(&short).await.unwrap(), None, "expired");
    assert!(!store.tasks.put(&short, "working", "{}", ttl).await.unwrap());
    assert_eq!(
        store
            .tasks
            .add_inputs(&short, &answers(&[("q", "2")]), limits(10))
            .await
            .unwrap(),
        AddedInputs::Gone
    );
    assert!(!store.tasks.cancel(&short).await.unwrap());
    assert_eq!(
        task(store, &renewed).await.map(|t| t.inputs),
        Some(answers(&[("q", "1")])),
        "the put renewed the task, answers included"
    );
    assert!(
        store
            .tasks
            .create(&short, "client", "working", "{}", TTL)
            .await
            .unwrap()
    );
    assert_eq!(
        task(store, &short).await,
        Some(fresh("working", "{}")),
        "created afresh: no answers, no cancel flag"
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(store.tasks.get(&renewed).await.unwrap(), None, "expired");
}

/// Ids are any text: braces, colons and the names of key parts keep tasks
/// apart.
pub async fn task_ids_with_braces_and_colons_stay_apart(store: &Store) {
    let u = uuid::Uuid::new_v4();
    let ids = [
        format!("{u}"),
        format!("{{{u}}}"),
        format!("{{{u}"),
        format!("{u}}}"),
        format!("}}{u}"),
        format!("a}}b{u}"),
        format!("{u}:inputs"),
        format!("{u}}}:inputs"),
        format!("{{{u}}}:inputs"),
        format!("task:{{{u}}}"),
        format!("hex:{{h{u}}}"),
        format!("urn:x:{u}:{{a}}:{{b}}"),
    ];
    for (i, id) in ids.iter().enumerate() {
        assert!(
            store
                .tasks
                .create(id, "client", "working", &i.to_string(), TTL)
                .await
                .unwrap(),
            "{id}"
        );
        let answer = i.to_string();
        assert!(
            store
                .tasks
                .add_inputs(id, &[(id.clone(), answer)], limits(10))
                .await
                .unwrap()
                == AddedInputs::Added,
            "{id}"
        );
    }
    assert!(store.tasks.cancel(&ids[1]).await.unwrap());
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            task(store, id).await,
            Some(Held {
                status: "working".into(),
                record: i.to_string(),
                inputs: vec![(id.clone(), i.to_string())],
                cancelled: i == 1,
            }),
            "{id}"
        );
    }
}
