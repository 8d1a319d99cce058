//! In-memory [`TaskStore`]: tasks of a single node, gone `ttl` after their
//! last write, at most [`MAX_TASKS`] held, finished ones within a byte
//! budget per node and per client.

use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use tokio::time::Instant;

use crate::budget::{ByteBudget, Ledger};
use crate::task_store::{AddedInputs, InputLimits, TERMINAL};
use crate::{StoreError, StoredTask, TaskStore};

/// Most tasks held at once; creating more fails with
/// [`StoreError::Unavailable`] until some expire.
pub const MAX_TASKS: usize = 100_000;

#[derive(Debug)]
struct Entry {
    status: String,
    record: String,
    /// Answers: input key, answer (JSON), in the order first given.
    inputs: Vec<(String, String)>,
    /// Bytes of `inputs`' answers.
    input_bytes: u64,
    cancelled: bool,
    /// Whose budget it counts against.
    client: String,
    expires: Instant,
}

impl Entry {
    /// What it counts against the budget: its record and its answers (as
    /// in every store).
    fn bytes(&self) -> u64 {
        self.record.len() as u64 + self.input_bytes
    }
}

/// In-memory [`TaskStore`].
#[derive(Debug)]
pub struct MemoryTasks {
    tasks: DashMap<String, Entry>,
    /// Finished tasks and their bytes.
    finished: Ledger<String>,
}

impl Default for MemoryTasks {
    fn default() -> Self {
        Self::new(super::FINISHED_TASKS)
    }
}

impl MemoryTasks {
    /// An empty store keeping finished tasks within `budget`.
    pub fn new(budget: ByteBudget) -> Self {
        Self {
            tasks: DashMap::new(),
            finished: Ledger::new(budget).reporting("finished_tasks", "task"),
        }
    }

    /// Tasks held, expired ones included until the next sweep (for tests).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Bytes of finished tasks held (for tests and metrics).
    pub fn finished_bytes(&self) -> u64 {
        self.finished.bytes()
    }

    fn sweep(&self, now: Instant) {
        self.tasks.retain(|id, e| {
            let live = e.expires > now;
            if !live {
                self.finished.forget(id.as_str());
            }
            live
        });
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
        client: &str,
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
                self.finished.forget(id);
                entry.insert(Entry {
                    status: status.to_owned(),
                    record: record.to_owned(),
                    inputs: Vec::new(),
                    input_bytes: 0,
                    cancelled: false,
                    client: client.to_owned(),
                    expires: now + ttl,
                });
                Ok(true)
            }
        }
    }

    async fn get(&self, id: &str) -> Result<Option<StoredTask>, StoreError> {
        Ok(self.live(id, Instant::now()).map(|e| StoredTask {
            status: e.status.clone(),
            record: e.record.clone(),
            answered: e.inputs.iter().map(|(k, _)| k.clone()).collect(),
            cancelled: e.cancelled,
        }))
    }

    async fn answer(&self, id: &str, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.live(id, Instant::now()).and_then(|e| {
            e.inputs
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, a)| a.clone())
        }))
    }

    async fn put(
        &self,
        id: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let now = Instant::now();
        let (client, bytes) = {
            let Some(mut entry) = self.live(id, now) else {
                return Ok(false);
            };
            if TERMINAL.contains(&entry.status.as_str()) {
                return Ok(false);
            }
            entry.status = status.to_owned();
            entry.record = record.to_owned();
            entry.expires = now + ttl;
            if !TERMINAL.contains(&status) {
                return Ok(true);
            }
            (entry.client.clone(), entry.bytes())
        };
        let dropped = self
            .finished
            .admit(id.to_owned(), &client, None, bytes, ttl);
        for old in dropped {
            self.tasks.remove(&old);
        }
        Ok(true)
    }

    async fn add_inputs(
        &self,
        id: &str,
        inputs: &[(String, String)],
        limits: InputLimits,
    ) -> Result<AddedInputs, StoreError> {
        let Some(mut entry) = self.live(id, Instant::now()) else {
            return Ok(AddedInputs::Gone);
        };
        // What the answers would be, checked whole before anything changes.
        let mut held = entry.inputs.clone();
        for (key, answer) in inputs {
            if let Some(slot) = held.iter_mut().find(|(k, _)| k == key) {
                slot.1.clone_from(answer);
            } else if held.len() < limits.max_keys {
                held.push((key.clone(), answer.clone()));
            }
        }
        let bytes: u64 = held.iter().map(|(_, a)| a.len() as u64).sum();
        if bytes > limits.max_bytes {
            return Ok(AddedInputs::TooLarge);
        }
        entry.inputs = held;
        entry.input_bytes = bytes;
        Ok(AddedInputs::Added)
    }

    async fn cancel(&self, id: &str) -> Result<bool, StoreError> {
        let Some(mut entry) = self.live(id, Instant::now()) else {
            return Ok(false);
        };
        entry.cancelled = true;
        Ok(true)
    }

    fn over_budget(&self) -> bool {
        self.finished.over_budget()
    }
}
