//! The tasks that listen streams on this node follow (the tasks
//! extension's `taskIds`). Each distinct task is read from the store once
//! per poll interval (`runtime.task_poll_interval_ms`, what clients are
//! told to poll at), however many streams follow it, and each follower gets
//! `notifications/tasks` when what `tasks/get` would answer changed. What
//! following costs is so bounded by the tasks followed, themselves bounded
//! by the tasks running (a task is followed no more once it ended), not by
//! the streams naming them.
//!
//! Owner: [`crate::stateless::Stateless`]. Stop path: a poller runs while
//! anything is followed and ends when nothing is; a stream's followings go
//! with it ([`Followed::unfollow`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use mcp_cluster_protocol::{ErrorCode, Message, Notification, Request, RequestId, methods};
use mcp_cluster_store::StreamId;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::stateless::Stateless;

/// A stream following tasks.
#[derive(Debug, Clone)]
pub(crate) struct Follower {
    pub(crate) stream: StreamId,
    /// The `subscriptions/listen` request id, as JSON.
    pub(crate) subscription: Value,
    pub(crate) tx: mpsc::WeakSender<Arc<str>>,
    /// Closes the stream: its client did not keep up.
    pub(crate) closed: CancellationToken,
}

/// A followed task: its principal's key (empty without one) and its id.
type Key = (String, String);

#[derive(Debug, Default)]
struct Entry {
    /// What was last sent (`None`: nothing yet).
    last: Option<Value>,
    followers: Vec<Follower>,
}

#[derive(Debug, Default)]
struct State {
    tasks: HashMap<Key, Entry>,
    /// A poller runs.
    polling: bool,
}

/// The tasks followed on this node.
#[derive(Debug, Default)]
pub(crate) struct Followed {
    state: Mutex<State>,
}

/// `notifications/tasks` on the listen stream `subscription`: the task as
/// `tasks/get` gives it, without the result's `resultType`.
fn notification(task: &Value, subscription: &Value) -> Arc<str> {
    let mut params = task.clone();
    if let Value::Object(params) = &mut params {
        params.remove("resultType");
        params.insert(
            "_meta".into(),
            json!({ methods::meta::SUBSCRIPTION_ID: subscription }),
        );
    }
    Arc::from(
        Message::Notification(Notification::new(methods::NOTIFICATION_TASKS, params)).to_json(),
    )
}

/// Whether a task as `tasks/get` gives it has ended.
fn ended(task: &Value) -> bool {
    matches!(
        task.get("status").and_then(Value::as_str),
        Some("completed" | "failed" | "cancelled")
    )
}

impl Followed {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `follower` follows `tasks` of `principal`; what was already read of
    /// one goes to it at once, the rest at the next poll.
    pub(crate) fn follow(
        &self,
        era: &Stateless,
        principal: &str,
        tasks: &BTreeSet<String>,
        follower: &Follower,
    ) {
        let start = {
            let mut state = self.lock();
            for task in tasks {
                let entry = state
                    .tasks
                    .entry((principal.to_owned(), task.clone()))
                    .or_default();
                if let Some(last) = &entry.last {
                    send(follower, last);
                }
                entry.followers.push(follower.clone());
            }
            !std::mem::replace(&mut state.polling, true)
        };
        if start {
            tokio::spawn(poll(era.clone()));
        }
    }

    /// The stream `stream` follows nothing more.
    pub(crate) fn unfollow(&self, stream: &StreamId) {
        let mut state = self.lock();
        for entry in state.tasks.values_mut() {
            entry.followers.retain(|f| &f.stream != stream);
        }
        state.tasks.retain(|_, entry| !entry.followers.is_empty());
    }
}

/// Sends `task` to `follower`; a follower whose stream is full has it
/// closed (as with every listen stream), and `false`.
fn send(follower: &Follower, task: &Value) -> bool {
    let sent = follower.tx.upgrade().is_some_and(|tx| {
        tx.try_send(notification(task, &follower.subscription))
            .is_ok()
    });
    if !sent {
        follower.closed.cancel();
    }
    sent
}

/// Reads every followed task once per poll interval until none is
/// followed.
async fn poll(era: Stateless) {
    let every = std::time::Duration::from_millis(era.config().task_poll_interval_ms.max(100));
    let followed = era.followed();
    loop {
        tokio::time::sleep(every).await;
        let keys: Vec<Key> = {
            let mut state = followed.lock();
            if state.tasks.is_empty() {
                state.polling = false;
                return;
            }
            state.tasks.keys().cloned().collect()
        };
        for key in keys {
            let get = Request::new(
                RequestId::Number(0),
                methods::TASKS_GET,
                json!({ "taskId": key.1 }),
            );
            let read = era.task_method(&get, Some(key.0.as_str())).await;
            let mut state = followed.lock();
            let Some(entry) = state.tasks.get_mut(&key) else {
                continue;
            };
            match read {
                Ok(task) if entry.last.as_ref() != Some(&task) => {
                    entry.followers.retain(|f| send(f, &task));
                    let done = ended(&task);
                    entry.last = Some(task);
                    if done || entry.followers.is_empty() {
                        state.tasks.remove(&key);
                    }
                }
                Ok(_) => {}
                // Gone (expired): nothing more to say of it. A store that
                // is away is read again at the next poll.
                Err(err) if err.code == ErrorCode::INVALID_PARAMS => {
                    state.tasks.remove(&key);
                }
                Err(_) => {}
            }
        }
    }
}
