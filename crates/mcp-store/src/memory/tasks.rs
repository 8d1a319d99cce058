//! In-memory [`TaskStore`]: tasks of a single node, gone `ttl` after their
//! last write, at most [`MAX_TASKS`] held.

use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use tokio::time::Instant;

use crate::task_store::TERMINAL;
use crate::{StoreError, StoredTask, TaskStore};

/// Most tasks held at once; creating more fails with
/// [`StoreError::Unavailable`] until some expire.
pub const MAX_TASKS: usize = 100_000;

#[derive(Debug)]
struct Entry {
    task: StoredTask,
    expires: Instant,
}

/// In-memory [`TaskStore`].
#[derive(Debug, Default)]
pub struct MemoryTasks {
    tasks: DashMap<String, Entry>,
}

impl MemoryTasks {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tasks held, expired ones included until the next sweep (for tests).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    fn sweep(&self, now: Instant) {
        self.tasks.retain(|_, e| e.expires > now);
    }

    /// The live entry of `id`, if any.
    fn live(
        &self,
        id: &str,
        now: Instant,
    ) -> Option<dashmap::mapref::one::RefMut<'_, String, Entry>> {
        self.tasks.get_mut(id).filter(|e| e.expires > now)
    }
}

#[async_trait]
impl TaskStore for MemoryTasks {
    async fn create(
        &self,
        id: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        if self.tasks.len() >= MAX_TASKS {
            self.sweep(now);
            if self.tasks.len() >= MAX_TASKS {
                return Err(StoreError::Unavailable(format!(
                    "{MAX_TASKS} tasks held; try again later"
                )));
            }
        }
        match self.tasks.entry(id.to_owned()) {
            dashmap::Entry::Occupied(e) if e.get().expires > now => Ok(false),
            entry => {
                entry.insert(Entry {
                    task: StoredTask {
                        status: status.to_owned(),
                        record: record.to_owned(),
                        inputs: Vec::new(),
                        cancelled: false,
                    },
                    expires: now + ttl,
                });
                Ok(true)
            }
        }
    }

    async fn get(&self, id: &str) -> Result<Option<StoredTask>, StoreError> {
        Ok(self.live(id, Instant::now()).map(|e| e.task.clone()))
    }

    async fn put(
        &self,
        id: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        let Some(mut entry) = self.live(id, now) else {
            return Ok(false);
        };
        if TERMINAL.contains(&entry.task.status.as_str()) {
            return Ok(false);
        }
        entry.task.status = status.to_owned();
        entry.task.record = record.to_owned();
        entry.expires = now + ttl;
        Ok(true)
    }

    async fn add_inputs(
        &self,
        id: &str,
        inputs: &[(String, String)],
        max: usize,
    ) -> Result<bool, StoreError> {
        let Some(mut entry) = self.live(id, Instant::now()) else {
            return Ok(false);
        };
        let held = &mut entry.task.inputs;
        for (key, answer) in inputs {
            if let Some(slot) = held.iter_mut().find(|(k, _)| k == key) {
                slot.1.clone_from(answer);
            } else if held.len() < max {
                held.push((key.clone(), answer.clone()));
            }
        }
        Ok(true)
    }

    async fn cancel(&self, id: &str) -> Result<bool, StoreError> {
        let Some(mut entry) = self.live(id, Instant::now()) else {
            return Ok(false);
        };
        entry.task.cancelled = true;
        Ok(true)
    }
}
