//! Session leases between nodes sharing one Redis: the node holding a
//! session's lease trusts its copy without reading, and a change made on
//! another node is answered only after that node stopped trusting it.

mod support;

use std::time::Duration;

use mcp_cluster_redis::{Keys, connect};
use mcp_cluster_store::suite::record;
use mcp_cluster_store::{NodeId, Subscribed};
use redis::AsyncCommands;
use support::RedisServer;

const TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_change_elsewhere_is_answered_only_after_the_holder_stopped_trusting() {
    let server = RedisServer::start();
    let a = connect(&server.config()).await.unwrap();
    let b = connect(&server.config()).await.unwrap();
    let c = connect(&server.config()).await.unwrap();
    let r = record();
    let id = r.id.clone();

    // The creating node holds the lease; the others read, and cannot take it.
    a.sessions.create(&r, TTL).await.unwrap();
    assert!(a.sessions.leased(&id));
    let seen = b.sessions.load_held(&id).await.unwrap().unwrap();
    assert_eq!(seen, r);
    assert!(!b.sessions.leased(&id));

    // B changes the session: by the time its save returns, A no longer
    // trusts its copy, and reads the change.
    let mut changed = seen;
    changed.log_level = Some("debug".into());
    assert!(b.sessions.save(&changed, TTL).await.unwrap());
    assert!(!a.sessions.leased(&id));
    let reread = a.sessions.load_held(&id).await.unwrap().unwrap();
    assert_eq!(reread.log_level.as_deref(), Some("debug"));
    // A rests after letting go: it does not take the lease back at once.
    assert!(!a.sessions.leased(&id));

    // C takes the free lease; A's subscribe and B's DELETE each wait for
    // the holder to let go.
    c.sessions.load_held(&id).await.unwrap().unwrap();
    assert!(c.sessions.leased(&id));
    assert_eq!(
        a.sessions.subscribe(&id, "file:///a", 8).await.unwrap(),
        Subscribed::Added
    );
    assert!(!c.sessions.leased(&id));
    assert!(
        c.sessions
            .load_held(&id)
            .await
            .unwrap()
            .unwrap()
            .subscriptions
            .contains("file:///a")
    );

    let d = connect(&server.config()).await.unwrap();
    d.sessions.load_held(&id).await.unwrap().unwrap();
    assert!(d.sessions.leased(&id));
    assert!(b.sessions.delete(&id).await.unwrap());
    assert!(!d.sessions.leased(&id));
    assert_eq!(d.sessions.load_held(&id).await.unwrap(), None);
    assert!(!d.sessions.leased(&id));

    // The holder's own changes need no one's leave.
    let mine = record();
    a.sessions.create(&mine, TTL).await.unwrap();
    assert!(a.sessions.leased(&mine.id));
    assert!(a.sessions.save(&mine, TTL).await.unwrap());
    assert!(a.sessions.leased(&mine.id));
    assert!(a.sessions.delete(&mine.id).await.unwrap());
    assert!(!a.sessions.leased(&mine.id));
}

#[tokio::test]
async fn a_holder_that_never_answers_delays_a_write_until_its_lease_runs_out() {
    let server = RedisServer::start();
    let a = connect(&server.config()).await.unwrap();
    let r = record();
    a.sessions.create(&r, TTL).await.unwrap();
    let keys = Keys::default();
    let lease = keys.lease(&r.id);
    let session = keys.session(&r.id);
    let mut raw = support::raw(&server).await;
    // A holder no node answers for (a node that died holding it).
    let gone = NodeId::random();
    let () = raw
        .set_options(
            &lease,
            gone.as_str(),
            redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(1500)),
        )
        .await
        .unwrap();
    let before: String = raw.get(&session).await.unwrap();

    let mut changed = r.clone();
    changed.log_level = Some("error".into());
    let writer = {
        let sessions = std::sync::Arc::clone(&a.sessions);
        let changed = changed.clone();
        tokio::spawn(async move { sessions.save(&changed, TTL).await })
    };
    // While the write waits: the lease is marked wanted (so its holder
    // could not renew it), and nothing was written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished());
    let marked: String = raw.get(&lease).await.unwrap();
    assert_eq!(marked, format!("{gone}!"));
    let during: String = raw.get(&session).await.unwrap();
    assert_eq!(during, before);

    // Once the lease ran out, the write went through.
    assert!(writer.await.unwrap().unwrap());
    let after = a.sessions.load(&r.id).await.unwrap().unwrap();
    assert_eq!(after.log_level.as_deref(), Some("error"));
    let left: Option<String> = raw.get(&lease).await.unwrap();
    assert_eq!(left, None);
}

#[tokio::test]
async fn a_lease_in_use_is_renewed_and_an_unused_one_lapses() {
    let server = RedisServer::start();
    let a = connect(&server.config()).await.unwrap();
    let r = record();
    a.sessions.create(&r, TTL).await.unwrap();
    let lease = Keys::default().lease(&r.id);
    let mut raw = support::raw(&server).await;

    // Used every 200 ms for twice its 3 s TTL: held throughout.
    for i in 0..30 {
        assert!(a.sessions.leased(&r.id), "lease lost after {i} uses");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let holder: Option<String> = raw.get(&lease).await.unwrap();
    assert!(holder.is_some());

    // Unused: no longer trusted, and gone from Redis for another node.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!a.sessions.leased(&r.id));
    let holder: Option<String> = raw.get(&lease).await.unwrap();
    assert_eq!(holder, None);
}

#[tokio::test]
async fn trouble_on_the_connection_ends_every_lease() {
    let mut server = RedisServer::start();
    let a = connect(&server.config()).await.unwrap();
    let r = record();
    a.sessions.create(&r, TTL).await.unwrap();
    assert!(a.sessions.leased(&r.id));
    let lease = Keys::default().lease(&r.id);
    let holder: String = support::raw(&server).await.get(&lease).await.unwrap();

    // Redis restarts (as a replica may be promoted) and even has the lease
    // key, so renewals would go on: trust ends anyway, because the node's
    // connections were lost, well before the lease could run out (2.75 s
    // after its last renewal at the earliest).
    server.restart();
    let () = support::raw(&server)
        .await
        .set_options(
            &lease,
            &holder,
            redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(60_000)),
        )
        .await
        .unwrap();
    let mut trusted = true;
    for _ in 0..30 {
        trusted = a.sessions.leased(&r.id);
        if !trusted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!trusted, "a lease outlived a lost connection");
}

/// A session created with its stream takes its lease in the same round
/// trip, and writes its stream's keys only when the stream is opened. A
/// creation under an id another node holds changes nothing of it: not its
/// lease, not its streams; a lease it took on that session is given back.
/// A key of another type under the stream's name fails the opening with
/// Redis's error.
#[tokio::test]
async fn creating_with_a_stream_takes_the_lease_and_a_conflict_leaves_all_as_it_was() {
    let server = RedisServer::start();
    let a = connect(&server.config()).await.unwrap();
    let b = connect(&server.config()).await.unwrap();
    let keys = Keys::default();
    let mut raw = support::raw(&server).await;

    let r = record();
    a.sessions
        .create_with_stream(&r, TTL, &*a.events)
        .await
        .unwrap();
    assert!(a.sessions.leased(&r.id));
    let holder: String = raw.get(keys.lease(&r.id)).await.unwrap();
    let streams: bool = raw.exists(keys.streams(&r.id)).await.unwrap();
    assert!(!streams, "no stream key before the stream is opened");
    a.sessions
        .open_standalone(&r.id, &r.standalone_stream, &*a.events)
        .await
        .unwrap();

    // B creates under the same id, with a stream of its own: while A holds
    // the lease, then with no lease on the session.
    let mut again = r.clone();
    again.standalone_stream = mcp_cluster_store::StreamId::random();
    for a_holds_the_lease in [true, false] {
        if !a_holds_the_lease {
            let () = raw.del(keys.lease(&r.id)).await.unwrap();
        }
        assert_eq!(
            b.sessions
                .create_with_stream(&again, TTL, &*b.events)
                .await
                .unwrap_err(),
            mcp_cluster_store::StoreError::Conflict
        );
        assert!(!b.sessions.leased(&r.id));
        let lease: Option<String> = raw.get(keys.lease(&r.id)).await.unwrap();
        if a_holds_the_lease {
            assert_eq!(lease, Some(holder.clone()), "the lease stays A's");
        } else {
            assert_eq!(
                lease, None,
                "B's lease on a session it did not create is gone"
            );
        }
        let streams: Vec<String> = raw.smembers(keys.streams(&r.id)).await.unwrap();
        assert_eq!(streams, vec![r.standalone_stream.to_string()]);
        let meta: bool = raw
            .exists(keys.meta(&r.id, &again.standalone_stream))
            .await
            .unwrap();
        assert!(!meta, "B made no stream");
        assert_eq!(a.sessions.load(&r.id).await.unwrap(), Some(r.clone()));
    }

    // A lease key already under a new id (a node's, for a session that
    // never was): the session is created, and its lease not trusted.
    let fresh = record();
    let () = raw
        .set(keys.lease(&fresh.id), NodeId::random().as_str())
        .await
        .unwrap();
    a.sessions
        .create_with_stream(&fresh, TTL, &*a.events)
        .await
        .unwrap();
    assert!(!a.sessions.leased(&fresh.id));

    // A string where the new stream's meta hash goes.
    let broken = record();
    let () = raw
        .set(keys.meta(&broken.id, &broken.standalone_stream), "x")
        .await
        .unwrap();
    a.sessions
        .create_with_stream(&broken, TTL, &*a.events)
        .await
        .unwrap();
    let err = a
        .sessions
        .open_standalone(&broken.id, &broken.standalone_stream, &*a.events)
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("WRONGTYPE"), "{err:?}");
}
