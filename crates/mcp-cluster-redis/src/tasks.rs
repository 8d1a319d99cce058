//! [`RedisTasks`]: the [`TaskStore`] every node of a cluster shares.
//!
//! A task is two hashes under one hash tag (see [`crate::keys`]): the task
//! hash (`status`, `record`, `cancel`) and its answers (input key → answer
//! JSON). Both carry the task's TTL: `create` and `put` set it, and
//! `add_inputs` gives the answers hash what is left of the task hash's, so
//! everything of a task expires together, `ttl` after its last `create` or
//! `put`, as in the in-memory store.
//!
//! Every operation is one Lua script, so checking the task and changing it
//! are one atomic step: a `put` racing a `put` of a terminal status, or
//! answers racing the task's expiry, never leave a half-written task.
//!
//! [`TaskStore::get`] returns the answered keys only (`HKEYS`), in the
//! answers hash's order, which Redis does not promise; a waiting task reads
//! the one answer it waits for ([`TaskStore::answer`], `HGET`), so polling
//! never moves every answer over the wire.
//!
//! Byte budgets: the task hash keeps the bytes of its answers
//! (`abytes`), and an update that would take them past the limit is
//! refused whole. A finished task counts against this node's
//! finished-task budget (a [`Ledger`] of the tasks this node ended); past
//! it the oldest are deleted (`UNLINK`) before their TTL. Each node answers
//! for what it wrote, so Redis holds at most the nodes' budgets together.

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_store::task_store::TERMINAL;
use mcp_cluster_store::{
    AddedInputs, ByteBudget, InputLimits, Ledger, StoreError, StoredTask, TaskStore,
};
use redis::{Script, Value};

use crate::config::millis;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::{Keys, TASK_ANSWER_BYTES, TASK_CANCEL, TASK_RECORD, TASK_STATUS};
use crate::reply;

/// A script with the task hash's field names (from [`crate::keys`]) before
/// `body`.
fn script(body: &str) -> Script {
    Script::new(&format!(
        "local STATUS, RECORD, CANCEL, ABYTES = '{TASK_STATUS}', '{TASK_RECORD}', '{TASK_CANCEL}', '{TASK_ANSWER_BYTES}'\n{body}"
    ))
}

/// KEYS: task, inputs. ARGV: status, record, TTL ms. Returns 1, or 0 (and
/// writes nothing) when the task exists. Drops answers left by an earlier
/// task of the same id, should they have outlived it.
static CREATE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], STATUS, ARGV[1], RECORD, ARGV[2], CANCEL, '0', ABYTES, '0')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
",
    )
});

/// KEYS: task, inputs. ARGV: status, record, TTL ms, then the terminal
/// statuses. Returns 1 + the bytes of the task's answers, or 0 (and writes
/// nothing) when the task is gone or its status is terminal.
static PUT: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local status = redis.call('HGET', KEYS[1], STATUS)
for i = 4, #ARGV do
  if status == ARGV[i] then
    return 0
  end
end
redis.call('HSET', KEYS[1], STATUS, ARGV[1], RECORD, ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1 + tonumber(redis.call('HGET', KEYS[1], ABYTES) or '0')
",
    )
});

/// KEYS: task, inputs. ARGV: max keys, max bytes, then input key and
/// answer pairs. Sets each answer whose key is held already, or while
/// fewer than `max` keys are held, unless the answers would then take more
/// than `max bytes` (then nothing is written); the answers keep the task's
/// TTL. Returns 1, 0 when the task is gone, 2 when too large.
static ADD_INPUTS: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local max = tonumber(ARGV[1])
local held = tonumber(redis.call('HGET', KEYS[1], ABYTES) or '0')
local keys = redis.call('HLEN', KEYS[2])
local new = {}
local set = {}
for i = 3, #ARGV - 1, 2 do
  local key = ARGV[i]
  local old = new[key]
  if old == nil and redis.call('HEXISTS', KEYS[2], key) == 1 then
    old = redis.call('HSTRLEN', KEYS[2], key)
  end
  if old ~= nil then
    held = held - old + #ARGV[i + 1]
    new[key] = #ARGV[i + 1]
    set[key] = ARGV[i + 1]
  elseif keys < max then
    keys = keys + 1
    held = held + #ARGV[i + 1]
    new[key] = #ARGV[i + 1]
    set[key] = ARGV[i + 1]
  end
end
if held > tonumber(ARGV[2]) then
  return 2
end
for key, answer in pairs(set) do
  redis.call('HSET', KEYS[2], key, answer)
end
redis.call('HSET', KEYS[1], ABYTES, held)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
else
  redis.call('PERSIST', KEYS[2])
end
return 1
",
    )
});

/// KEYS: task. Sets the cancel flag, keeping the TTL. Returns 1, or 0 when
/// the task is gone.
static CANCEL: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], CANCEL, '1')
return 1
",
    )
});

/// KEYS: task, inputs. Returns `{task fields, answered keys}` (fields as
/// `[field, value, ...]`), or nil when the task is gone.
static GET: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local task = redis.call('HGETALL', KEYS[1])
if #task == 0 then
  return false
end
return {task, redis.call('HKEYS', KEYS[2])}
",
    )
});

/// KEYS: task, inputs. ARGV: input key. Returns the answer, or nil (also
/// when the task is gone).
static ANSWER: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
return redis.call('HGET', KEYS[2], ARGV[1])
",
    )
});

/// The Redis [`TaskStore`].
#[derive(Debug)]
pub struct RedisTasks {
    redis: Redis,
    keys: Keys,
    /// The tasks this node ended, their bytes and their clients.
    finished: Ledger<String>,
    /// Each task's client, from its creation on this node to its end.
    clients: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl RedisTasks {
    pub(crate) fn new(redis: Redis, keys: Keys, budget: ByteBudget) -> Self {
        Self {
            redis,
            keys,
            finished: Ledger::new(budget).reporting("finished_tasks", "task"),
            clients: std::sync::Mutex::default(),
        }
    }

    /// Accounts for a task this node just ended with `bytes` of answers,
    /// and deletes the oldest finished tasks beyond the budget.
    async fn finished(&self, id: &str, record: &str, answers: u64, ttl: Duration) {
        let client = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id)
            .unwrap_or_default();
        let bytes = record.len() as u64 + answers;
        let dropped = self
            .finished
            .admit(id.to_owned(), &client, None, bytes, ttl);
        if dropped.is_empty() {
            return;
        }
        // Tasks sit in different slots of a Redis Cluster: one UNLINK each.
        for old in &dropped {
            let unlink = redis::cmd("UNLINK")
                .arg(self.keys.task(old))
                .arg(self.keys.task_inputs(old))
                .clone();
            if let Err(err) = self.redis.cmd("task_evict", &unlink).await {
                // Their TTL deletes them anyway.
                tracing::warn!(error = %err, "Finished tasks over the byte budget not deleted.");
                return;
            }
        }
    }
}

/// `[field, value, ...]` as pairs of text.
fn pairs(value: Value) -> Result<Vec<(String, String)>, StoreError> {
    let items = reply::array(value)?;
    if items.len() % 2 != 0 {
        return Err(corrupt("hash reply has an odd number of items"));
    }
    let mut items = items.into_iter();
    let mut out = Vec::with_capacity(items.len() / 2);
    while let (Some(field), Some(value)) = (items.next(), items.next()) {
        out.push((reply::text(field)?, reply::text(value)?));
    }
    Ok(out)
}

/// The reply of [`GET`].
fn stored_task(id: &str, value: Value) -> Result<Option<StoredTask>, StoreError> {
    if value == Value::Nil {
        return Ok(None);
    }
    let mut parts = reply::array(value)?.into_iter();
    let (Some(task), Some(inputs), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(corrupt(format_args!(
            "task {id:?}: reply is not {{task, inputs}}"
        )));
    };
    let (mut status, mut record, mut cancelled) = (None, None, false);
    for (field, value) in pairs(task)? {
        match field.as_str() {
            TASK_STATUS => status = Some(value),
            TASK_RECORD => record = Some(value),
            TASK_CANCEL => cancelled = value == "1",
            _ => {}
        }
    }
    let (Some(status), Some(record)) = (status, record) else {
        return Err(corrupt(format_args!(
            "task {id:?} has no status or no record"
        )));
    };
    let answered = reply::array(inputs)?
        .into_iter()
        .map(reply::text)
        .collect::<Result<_, _>>()?;
    Ok(Some(StoredTask {
        status,
        record,
        answered,
        cancelled,
    }))
}

/// A script's `1` or `0`.
fn done(value: &Value) -> Result<bool, StoreError> {
    match reply::int(value)? {
        1 => Ok(true),
        0 => Ok(false),
        n => Err(corrupt(format_args!("task script answered {n}"))),
    }
}

#[async_trait]
impl TaskStore for RedisTasks {
    async fn create(
        &self,
        id: &str,
        client: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .script_kept(
                "task_create",
                CREATE
                    .key(self.keys.task(id))
                    .key(self.keys.task_inputs(id))
                    .arg(status)
                    .arg(record)
                    .arg(millis(ttl)),
            )
            .await?;
        let created = done(&reply)?;
        if created {
            // Bounded by the tasks running on this node: removed when it
            // ends them (the runtime ends every task it created).
            self.clients
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id.to_owned(), client.to_owned());
        }
        Ok(created)
    }

    async fn answer(&self, id: &str, key: &str) -> Result<Option<String>, StoreError> {
        let reply = self
            .redis
            .script_kept(
                "task_answer",
                ANSWER
                    .key(self.keys.task(id))
                    .key(self.keys.task_inputs(id))
                    .arg(key),
            )
            .await?;
        if reply == Value::Nil {
            return Ok(None);
        }
        reply::text(reply).map(Some)
    }

    async fn get(&self, id: &str) -> Result<Option<StoredTask>, StoreError> {
        let reply = self
            .redis
            .script(
                "task_get",
                GET.key(self.keys.task(id)).key(self.keys.task_inputs(id)),
            )
            .await?;
        stored_task(id, reply)
    }

    async fn put(
        &self,
        id: &str,
        status: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut invocation = PUT.key(self.keys.task(id));
        invocation
            .key(self.keys.task_inputs(id))
            .arg(status)
            .arg(record)
            .arg(millis(ttl));
        for terminal in TERMINAL {
            invocation.arg(terminal);
        }
        let reply = self.redis.script_kept("task_put", &invocation).await?;
        let n = reply::int(&reply)?;
        if n < 1 {
            if TERMINAL.contains(&status) {
                // Ended elsewhere, or gone: this node will not end it.
                self.clients
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(id);
            }
            return Ok(false);
        }
        if TERMINAL.contains(&status) {
            self.finished(id, record, u64::try_from(n - 1).unwrap_or(0), ttl)
                .await;
        }
        Ok(true)
    }

    async fn add_inputs(
        &self,
        id: &str,
        inputs: &[(String, String)],
        limits: InputLimits,
    ) -> Result<AddedInputs, StoreError> {
        let mut invocation = ADD_INPUTS.key(self.keys.task(id));
        invocation
            .key(self.keys.task_inputs(id))
            .arg(u64::try_from(limits.max_keys).unwrap_or(u64::MAX))
            // Lua numbers are doubles: beyond 2^53 the bound is "none".
            .arg(limits.max_bytes.min(1 << 53));
        for (key, answer) in inputs {
            invocation.arg(key).arg(answer);
        }
        let reply = self
            .redis
            .script_kept("task_add_inputs", &invocation)
            .await?;
        match reply::int(&reply)? {
            1 => Ok(AddedInputs::Added),
            0 => Ok(AddedInputs::Gone),
            2 => Ok(AddedInputs::TooLarge),
            n => Err(corrupt(format_args!("task script answered {n}"))),
        }
    }

    async fn cancel(&self, id: &str) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .script_kept("task_cancel", &CANCEL.key(self.keys.task(id)))
            .await?;
        done(&reply)
    }

    fn over_budget(&self) -> bool {
        self.finished.over_budget()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn get_replies_decode_or_are_corrupt() {
        assert_eq!(stored_task("t", Value::Nil).unwrap(), None);
        let reply = Value::Array(vec![
            Value::Array(vec![
                bulk("record"),
                bulk("{}"),
                bulk("cancel"),
                bulk("1"),
                bulk("status"),
                bulk("working"),
            ]),
            Value::Array(vec![bulk("q")]),
        ]);
        assert_eq!(
            stored_task("t", reply).unwrap(),
            Some(StoredTask {
                status: "working".into(),
                record: "{}".into(),
                answered: vec!["q".into()],
                cancelled: true,
            })
        );
        let no_status = Value::Array(vec![
            Value::Array(vec![bulk("record"), bulk("{}")]),
            Value::Array(vec![]),
        ]);
        assert!(stored_task("t", no_status).is_err());
        let odd = Value::Array(vec![
            Value::Array(vec![bulk("status")]),
            Value::Array(vec![]),
        ]);
        assert!(stored_task("t", odd).is_err());
        assert!(stored_task("t", Value::Int(1)).is_err());
        assert!(done(&Value::Int(2)).is_err());
    }
}
