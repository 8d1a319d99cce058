//! A write the store applied but could not confirm (Redis took it, then
//! the wait for its replica failed as the primary died) is never written a
//! second time: a request's stream carries one response, whatever failed
//! on the way.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use mcp_cluster_protocol::types::{Implementation, ServerCapabilities};
use mcp_cluster_protocol::{ErrorObject, Message, Notification, Request, RequestId, Response};
use mcp_cluster_runtime::{
    ExchangeReply, Inbound, McpService, RequestContext, ResponseMode, Runtime, RuntimeConfig,
    Transport,
};
use mcp_cluster_store::memory::{MemoryEventLog, Retention};
use mcp_cluster_store::{
    EventId, EventLog, Position, ReadBatch, SessionId, Store, StoreError, StreamId, Wakeup,
};
use serde_json::{Value, json};

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

/// The in-memory log, whose next `unconfirmed` appends go in and then
/// fail as if the store had gone away before saying so.
#[derive(Debug)]
struct Unconfirmed {
    inner: MemoryEventLog,
    unconfirmed: AtomicUsize,
}

impl Unconfirmed {
    fn confirm<T>(&self, applied: Result<T, StoreError>) -> Result<T, StoreError> {
        let applied = applied?;
        let left = self.unconfirmed.load(Ordering::SeqCst);
        if left > 0 {
            self.unconfirmed.store(left - 1, Ordering::SeqCst);
            return Err(StoreError::Unavailable(
                "the wait for a replica failed".into(),
            ));
        }
        Ok(applied)
    }
}

#[async_trait]
impl EventLog for Unconfirmed {
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
        self.confirm(self.inner.append(session, stream, data).await)
    }

    async fn append_following(
        &self,
        session: &SessionId,
        stream: &StreamId,
        data: Arc<str>,
        follows: Position,
    ) -> Result<EventId, StoreError> {
        self.confirm(
            self.inner
                .append_following(session, stream, data, follows)
                .await,
        )
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
        self.inner.read(session, stream, after, max).await
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

fn progress(n: u64) -> Message {
    Message::Notification(Notification::new(
        "notifications/progress",
        json!({"progressToken": "t", "progress": n}),
    ))
}

/// Runs one request's exchange on a stream where the appends numbered in
/// `unconfirmed` (0 the first) go in unconfirmed: a progress, another,
/// then the response. Returns the messages its stream holds.
async fn stream_of_one_request(unconfirmed: &[usize]) -> Vec<Value> {
    let log = Arc::new(Unconfirmed {
        inner: MemoryEventLog::new(Retention::default()),
        unconfirmed: AtomicUsize::new(0),
    });
    let store = Store {
        events: Arc::clone(&log) as Arc<dyn EventLog>,
        ..Store::memory(Retention::default())
    };
    let runtime = Runtime::new(Arc::new(Nothing), store, RuntimeConfig::default());
    let session = runtime
        .open_session(&Inbound::new(Transport::StreamableHttp))
        .await
        .unwrap();
    let id = RequestId::Number(1);
    let (exchange, reply) =
        runtime.exchange_with_mode(&session, vec![id.clone()], ResponseMode::Sse);
    let arm = |n: usize| {
        log.unconfirmed
            .store(usize::from(unconfirmed.contains(&n)), Ordering::SeqCst);
    };
    arm(0);
    let _ = exchange.emit(&progress(1)).await;
    arm(1);
    let _ = exchange.emit(&progress(2)).await;
    arm(2);
    exchange
        .finish(Some(Response::result(id, json!({"content": []}))))
        .await
        .unwrap();
    let Ok(ExchangeReply::Stream(stream, _)) = reply.await else {
        panic!("the exchange streams");
    };
    let batch = log
        .read(session.id(), &stream, Position::START, 100)
        .await
        .unwrap();
    assert!(batch.closed, "the stream was closed");
    batch
        .events
        .iter()
        .map(|event| serde_json::from_str(&event.data).unwrap())
        .collect()
}

fn responses(messages: &[Value]) -> Vec<&Value> {
    messages.iter().filter(|m| m.get("id").is_some()).collect()
}

#[actix_rt::test]
async fn a_response_that_went_in_unconfirmed_is_not_written_again() {
    let messages = stream_of_one_request(&[2]).await;
    let answers = responses(&messages);
    assert_eq!(answers.len(), 1, "{messages:?}");
    assert!(answers[0].get("result").is_some(), "{messages:?}");
    assert_eq!(messages.len(), 3, "{messages:?}");
}

#[actix_rt::test]
async fn after_an_unconfirmed_progress_the_error_that_says_so_is_written_once() {
    // The second progress went in without the exchange knowing: its
    // response is the error that says messages may be lost, once, even
    // when that write too goes in unconfirmed.
    for failing in [&[1][..], &[1, 2][..], &[0, 2][..]] {
        let messages = stream_of_one_request(failing).await;
        let answers = responses(&messages);
        assert_eq!(answers.len(), 1, "{failing:?}: {messages:?}");
        assert_eq!(answers[0]["error"]["code"], -32603, "{messages:?}");
        assert_eq!(messages.len(), 3, "{failing:?}: {messages:?}");
    }
}
