//! [`RedisQuotas`]: the [`QuotaStore`] every node of a cluster shares.
//!
//! One key per subject and quota (see [`crate::keys`]):
//! - a rate is a string holding the theoretical arrival time of the next
//!   unit (GCRA, microseconds since the epoch by Redis's clock), with a
//!   `PX` that ends when the subject has been quiet for a window;
//! - a lease set is a sorted set, member → lease expiry (milliseconds since
//!   the epoch by Redis's clock), with a `PX` that ends with its longest
//!   lease: a set whose holders all died goes by itself.
//!
//! Every check is one Lua script: reading the count and adding to it are
//! one atomic step, so nodes checking the same subject concurrently never
//! overshoot. The scripts read Redis's clock (`TIME`), not the node's, so
//! nodes with skewed clocks agree (scripts are replicated by their
//! effects, the default since Redis 5).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use mcp_cluster_store::{QuotaKey, QuotaStore, Rate, StoreError, Verdict};
use redis::Script;

use crate::clock::with_now_ms;
use crate::config::millis;
use crate::connection::Redis;
use crate::error::corrupt;
use crate::keys::Keys;
use crate::reply;

/// KEYS: the rate. ARGV: cost, interval (µs), window (µs). Returns
/// `{admitted, retry after (µs)}`; counts only what it admits.
static HIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost = tonumber(ARGV[1])
local window = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tat < now then tat = now end
local new = tat + cost * tonumber(ARGV[2])
local allowed_at = new - window
if allowed_at > now then
  return {0, allowed_at - now}
end
redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.ceil((new - now) / 1000))
return {1, 0}
",
    )
});

/// KEYS: the lease set. ARGV: member, max, lease (ms). Returns
/// `{admitted, retry after (ms)}`.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then return 1 end
return 0
",
    )
});

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    with_now_ms(
        r"
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1])
   and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if first[2] then
    return {0, tonumber(first[2]) - now}
  end
  return {0, tonumber(ARGV[3])}
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now)
return {1, 0}
",
    )
});

/// KEYS: the lease set. ARGV: lease (ms), members... Gives every member a
/// fresh lease (adding those that lapsed), drops lapsed others.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    with_now_ms(
        r"
local now = now_ms()
local expiry = now + tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], expiry, ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now)
end
return 1
",
    )
});

/// The Redis [`QuotaStore`].
#[derive(Debug)]
pub struct RedisQuotas {
    redis: Redis,
    keys: Keys,
}

impl RedisQuotas {
    pub(crate) fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys }
    }
}

/// Microseconds of `d`, at least 1.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// `{admitted, retry after}` in `unit`s.
fn verdict(reply: redis::Value, unit: fn(u64) -> Duration) -> Result<Verdict, StoreError> {
    let fields = reply::array(reply)?;
    let (Some(admitted), Some(wait)) = (fields.first(), fields.get(1)) else {
        return Err(corrupt("quota reply is not {admitted, retry_after}"));
    };
    Ok(if reply::int(admitted)? == 1 {
        Verdict::Admitted
    } else {
        Verdict::Limited {
            retry_after: unit(u64::try_from(reply::int(wait)?).unwrap_or(0)),
        }
    })
}

#[async_trait]
impl QuotaStore for RedisQuotas {
    async fn hit(&self, key: &QuotaKey, cost: u32, rate: Rate) -> Result<Verdict, StoreError> {
        if cost == 0 {
            return Ok(Verdict::Admitted);
        }
        if cost > rate.limit {
            return Ok(Verdict::Limited {
                retry_after: rate.window,
            });
        }
        let reply = self
            .redis
            .script(
                "quota_hit",
                HIT.key(self.keys.quota(key))
                    .arg(cost)
                    .arg(micros(rate.interval()))
                    .arg(micros(rate.window)),
            )
            .await?;
        verdict(reply, Duration::from_micros)
    }

    async fn claim_once(&self, key: &QuotaKey, ttl: Duration) -> Result<bool, StoreError> {
        let reply = self
            .redis
            .script(
                "quota_claim",
                CLAIM.key(self.keys.quota(key)).arg(millis(ttl).max(1)),
            )
            .await?;
        Ok(reply::int(&reply)? == 1)
    }

    async fn acquire(
        &self,
        key: &QuotaKey,
        member: &str,
        max: u32,
        lease: Duration,
    ) -> Result<Verdict, StoreError> {
        let reply = self
            .redis
            .script(
                "quota_acquire",
                ACQUIRE
                    .key(self.keys.quota(key))
                    .arg(member)
                    .arg(max)
                    .arg(millis(lease)),
            )
            .await?;
        verdict(reply, Duration::from_millis)
    }

    async fn renew(
        &self,
        key: &QuotaKey,
        members: &[Arc<str>],
        lease: Duration,
    ) -> Result<(), StoreError> {
        if members.is_empty() {
            return Ok(());
        }
        let mut invocation = RENEW.key(self.keys.quota(key));
        invocation.arg(millis(lease));
        for member in members {
            invocation.arg(&**member);
        }
        self.redis
            .script("quota_renew", &invocation)
            .await
            .map(drop)
    }

    async fn release(&self, key: &QuotaKey, member: &str) -> Result<(), StoreError> {
        self.redis
            .cmd(
                "quota_release",
                redis::cmd("ZREM").arg(self.keys.quota(key)).arg(member),
            )
            .await
            .map(drop)
    }
}
