//! A tenant's quota usage shared by every replica (durable runs), so a
//! quota holds for the deployment, not per replica.
//!
//! Keys (one hash tag per tenant, so one script sees all of them):
//!
//! - `{prefix}:quota:{<hex tenant>}:runs` — a sorted set of the tenant's
//!   runs not ended, scored by their deadline.
//! - `{prefix}:quota:{<hex tenant>}:waiting` — the tenant's runs waiting
//!   for a person, scored by the latest deadline of their questions.
//! - `{prefix}:quota:{<hex tenant>}:tokens` — a hash: minute (Unix) → model
//!   tokens used in it; minutes older than an hour are dropped.
//!
//! Entries are removed when a run ends or stops waiting; one a replica
//! could not remove (it died) leaves at its score, the run's or question's
//! deadline, so usage heals by itself.

use std::sync::LazyLock;

use redis::Script;

use super::{NOW, SharedState, hex, redis_error};
use crate::error::Error;

/// What [`SharedState::admit`] decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Admitted {
    /// The run is counted.
    Yes,
    /// The tenant has `.1` runs not ended (quota `concurrent_runs`).
    Runs(u64),
    /// The tenant has `.1` runs waiting for people (quota `parked_runs`).
    Waiting(u64),
    /// The tenant used `.1` tokens in the last hour
    /// (quota `model_tokens_per_hour`).
    Tokens(u64),
}

/// Limits of one admission; `-1`: none.
#[derive(Debug, Clone, Copy)]
pub struct AdmitLimits {
    /// concurrent_runs.
    pub runs: i64,
    /// parked_runs.
    pub waiting: i64,
    /// model_tokens_per_hour.
    pub tokens: i64,
}

static ADMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{TOKENS_USED}{}",
        r"
-- KEYS[1] runs, KEYS[2] waiting, KEYS[3] tokens; ARGV[1] run id,
-- ARGV[2] its deadline (ms), ARGV[3..5] limits of runs, waiting, tokens
-- (-1: none).
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
-- A run admitted already (one id started twice) counts once.
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {0, 0} end
local runs = redis.call('ZCARD', KEYS[1])
if tonumber(ARGV[3]) >= 0 and runs >= tonumber(ARGV[3]) then
  return {1, runs}
end
local waiting = redis.call('ZCARD', KEYS[2])
if tonumber(ARGV[4]) >= 0 and waiting >= tonumber(ARGV[4]) then
  return {2, waiting}
end
if tonumber(ARGV[5]) >= 0 then
  local used = tokens_used(KEYS[3])
  if used >= tonumber(ARGV[5]) then
    return {3, used}
  end
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PEXPIREAT', KEYS[1], math.max(redis.call('PEXPIRETIME', KEYS[1]), tonumber(ARGV[2])))
return {0, 0}
"
    ))
});

/// Sums a tokens hash over the last hour, dropping older minutes.
const TOKENS_USED: &str = r"
local function tokens_used(key)
  local minute = math.floor(now / 60000)
  local all = redis.call('HGETALL', key)
  local used = 0
  for i = 1, #all, 2 do
    local m = tonumber(all[i])
    if m <= minute - 60 then
      redis.call('HDEL', key, all[i])
    else
      used = used + tonumber(all[i + 1])
    end
  end
  return used
end
";

static TOKENS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{TOKENS_USED}{}",
        r"
-- KEYS[1] tokens; ARGV[1] tokens to add (0: only read). Returns the
-- tokens of the last hour, these included.
if tonumber(ARGV[1]) > 0 then
  redis.call('HINCRBY', KEYS[1], math.floor(now / 60000), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], 3660000)
end
return tokens_used(KEYS[1])
"
    ))
});

impl SharedState {
    pub(super) fn quota_key(&self, tenant: &str, what: &str) -> String {
        self.key("quota", &hex(tenant), what)
    }

    /// Counts a new run of `tenant` (until `deadline_ms`) if the tenant is
    /// under `limits`; else says which quota it reached.
    pub async fn admit(
        &self,
        tenant: &str,
        run_id: &str,
        deadline_ms: i64,
        limits: AdmitLimits,
    ) -> Result<Admitted, Error> {
        let mut c = self.conn().await?;
        let (code, n): (i64, u64) = ADMIT
            .key(self.quota_key(tenant, "runs"))
            .key(self.quota_key(tenant, "waiting"))
            .key(self.quota_key(tenant, "tokens"))
            .arg(run_id)
            .arg(deadline_ms)
            .arg(limits.runs)
            .arg(limits.waiting)
            .arg(limits.tokens)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)?;
        Ok(match code {
            0 => Admitted::Yes,
            1 => Admitted::Runs(n),
            2 => Admitted::Waiting(n),
            _ => Admitted::Tokens(n),
        })
    }

    /// A run of `tenant` ended: it no longer counts.
    pub async fn run_ended(&self, tenant: &str, run_id: &str) -> Result<(), Error> {
        let mut c = self.conn().await?;
        redis::pipe()
            .cmd("ZREM")
            .arg(self.quota_key(tenant, "runs"))
            .arg(run_id)
            .ignore()
            .cmd("ZREM")
            .arg(self.quota_key(tenant, "waiting"))
            .arg(run_id)
            .ignore()
            .query_async::<()>(&mut c)
            .await
            .map_err(redis_error)
    }

    /// A run of `tenant` waits for a person until `deadline_ms` (`Some`),
    /// or no longer waits (`None`).
    pub async fn set_waiting(
        &self,
        tenant: &str,
        run_id: &str,
        deadline_ms: Option<i64>,
    ) -> Result<(), Error> {
        let mut c = self.conn().await?;
        let key = self.quota_key(tenant, "waiting");
        let mut pipe = redis::pipe();
        match deadline_ms {
            // The set lives as long as its latest entry (NX: a new set,
            // GT: a later deadline).
            Some(deadline) => pipe
                .cmd("ZADD")
                .arg(&key)
                .arg("GT")
                .arg(deadline)
                .arg(run_id)
                .ignore()
                .cmd("PEXPIREAT")
                .arg(&key)
                .arg(deadline)
                .arg("NX")
                .ignore()
                .cmd("PEXPIREAT")
                .arg(&key)
                .arg(deadline)
                .arg("GT")
                .ignore(),
            None => pipe.cmd("ZREM").arg(&key).arg(run_id).ignore(),
        };
        pipe.query_async::<()>(&mut c).await.map_err(redis_error)
    }

    /// Adds `tokens` to `tenant`'s last hour (0: only reads); the tokens
    /// of its last hour.
    pub async fn tokens(&self, tenant: &str, tokens: u64) -> Result<u64, Error> {
        let mut c = self.conn().await?;
        TOKENS
            .key(self.quota_key(tenant, "tokens"))
            .arg(tokens)
            .invoke_async(&mut c)
            .await
            .map_err(redis_error)
    }
}
