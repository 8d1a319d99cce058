//! A reader that does not read makes the node hold at most one read batch
//! of its stream: a follow pulls events from the log only when its
//! connection asks for the next one, so however far behind the reader is,
//! the rest waits in the log (bounded by retention), not in the node.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_protocol::RequestId;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorObject, Request};
use mcp_cluster_runtime::{
    FollowItem, Inbound, McpService, RequestContext, Runtime, RuntimeConfig, Transport,
};
use mcp_cluster_store::memory::{MemoryEventLog, Retention};
use mcp_cluster_store::{
    EventId, EventLog, Position, ReadBatch, SessionId, Store, StoreError, StreamId, Wakeup,
};
use serde_json::{Value, json};

/// The most events a follow reads ahead of its reader (`READ_BATCH` in
/// `node/follow.rs`, documented in proto-docs/limits.md).
const READ_AHEAD: usize = 64;

#[derive(Debug)]
struct Nothing;

#[async_trait]
impl McpService for Nothing {
    fn server_info(&self) -> Implementation {
        Implementation::default()
    }

    fn capabilities(&self) -> ServerCapabilities {
        ServerCapabilities::default()
    }

    async fn handle(&self, _: Request, _: RequestContext) -> Result<Value, ErrorObject> {
        Ok(json!({}))
    }
}

/// The in-memory log, counting the events handed out by reads.
#[derive(Debug)]
struct CountingLog {
    inner: MemoryEventLog,
    read: AtomicUsize,
}

#[async_trait]
impl EventLog for CountingLog {
    async fn create_stream_as(
        &self,
        session: &SessionId,
        stream: &StreamId,
        requests: &[RequestId],
    ) -> Result<(), StoreError> {
        self.inner.create_stream_as(session, stream, requests).await
    }

    async fn stream_requests(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Vec<RequestId>, StoreError> {
        self.inner.stream_requests(session, stream).await
    }

    async fn append(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
    ) -> Result<EventId, StoreError> {
        self.inner.append(session, stream, data).await
    }

    async fn close_stream(
        &self,
        session: &SessionId,
        stream: &StreamId,
        owner: &str,
    ) -> Result<(), StoreError> {
        self.inner.close_stream(session, stream, owner).await
    }

    async fn read(
        &self,
        session: &SessionId,
        stream: &StreamId,
        after: Position,
        max: usize,
    ) -> Result<ReadBatch, StoreError> {
        let batch = self.inner.read(session, stream, after, max).await?;
        self.read.fetch_add(batch.events.len(), Ordering::SeqCst);
        Ok(batch)
    }

    async fn tail(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError> {
        self.inner.tail(session, stream).await
    }

    async fn oldest(&self, session: &SessionId, stream: &StreamId) -> Result<Position, StoreError> {
        self.inner.oldest(session, stream).await
    }

    async fn subscribe(
        &self,
        session: &SessionId,
        stream: &StreamId,
    ) -> Result<Wakeup, StoreError> {
        self.inner.subscribe(session, stream).await
    }

    async fn touch(&self, session: &SessionId, stream: &StreamId) -> Result<(), StoreError> {
        self.inner.touch(session, stream).await
    }

    async fn delete_session(&self, session: &SessionId) -> Result<(), StoreError> {
        self.inner.delete_session(session).await
    }
}

#[actix_rt::test]
async fn a_reader_that_stops_reading_holds_at_most_one_read_batch() {
    let log = Arc::new(CountingLog {
        inner: MemoryEventLog::new(Retention::default()),
        read: AtomicUsize::new(0),
    });
    let store = Store {
        events: Arc::clone(&log) as Arc<dyn EventLog>,
        ..Store::memory(Retention::default())
    };
    let runtime = Runtime::new(Arc::new(Nothing), store, RuntimeConfig::default());
    let session = runtime
        .open_session(&Inbound::new(Transport::Stdio))
        .await
        .unwrap();
    let (_, mut follow) = runtime.follow_standalone(&session).await.unwrap();
    let stream = session.standalone_stream().clone();
    const EVENTS: usize = 2_000;
    for i in 0..EVENTS {
        let data = Arc::from(format!("{{\"n\":{i}}}"));
        log.append(session.id(), &stream, data).await.unwrap();
    }
    let before = log.read.load(Ordering::SeqCst);

    // The reader takes one event, then stops: one batch was read.
    assert!(matches!(follow.next().await, Some(FollowItem::Event(..))));
    let after_one = log.read.load(Ordering::SeqCst) - before;
    assert!(
        (1..=READ_AHEAD).contains(&after_one),
        "read {after_one} events for one"
    );
    // Nothing is read behind its back while it does not ask.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(log.read.load(Ordering::SeqCst) - before, after_one);

    // However many it takes, the node is never more than a batch ahead,
    // and every event arrives once, in order.
    for taken in 2..=500 {
        let Some(FollowItem::Event(_, data)) = follow.next().await else {
            panic!("expected event {taken}")
        };
        assert_eq!(&*data, format!("{{\"n\":{}}}", taken - 1));
        let read = log.read.load(Ordering::SeqCst) - before;
        assert!(
            read >= taken && read - taken < READ_AHEAD,
            "{read} events read for {taken} taken"
        );
    }
}
