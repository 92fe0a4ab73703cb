//! Circuit breakers shared by every replica (durable runs; see
//! `model::call::breaker`).
//!
//! Keys, per provider entry (one hash tag each):
//!
//! - `{prefix}:breaker:{<hex provider>}:failures` — a sorted set of the
//!   counted failures within the window, by when (Redis's clock).
//! - `{prefix}:breaker:{<hex provider>}:open` — present while the breaker
//!   is open; it expires with the cool-down.
//! - `{prefix}:breaker:{<hex provider>}:probe` — the replica probing after
//!   the cool-down (expires after the model timeout).

use std::{
    sync::{
        LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use redis::Script;

use super::{NOW, SharedState, hex};
use crate::catalog::models::BreakerSpec;
use crate::model::call::breaker::SharedBreakers;

static FAILED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{}",
        r"
-- KEYS[1] failures, KEYS[2] open, KEYS[3] the probe; ARGV[1] window
-- (ms), ARGV[2] failures that open it, ARGV[3] cool-down (ms), ARGV[4]
-- this failure's id, ARGV[5] 1 when it is a probe's (which opens it again
-- at once, and ends the probe: the next comes after the cool-down).
-- Returns how long it is open for (ms), or -1 when closed.
local w = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - w)
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], w)
if ARGV[5] == '1' then
  redis.call('DEL', KEYS[3])
end
if ARGV[5] == '1' or redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
end
local open = redis.call('PTTL', KEYS[2])
if open > 0 then
  return open
end
return -1
"
    ))
});

static ABANDON: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1] the probe; ARGV[1] this replica: its probe given back.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

static FAILURE_IDS: AtomicU64 = AtomicU64::new(0);

impl SharedState {
    fn breaker_key(&self, provider: &str, what: &str) -> String {
        self.key("breaker", &hex(provider), what)
    }
}

#[async_trait::async_trait]
impl SharedBreakers for SharedState {
    async fn failed(
        &self,
        provider: &str,
        spec: &BreakerSpec,
        probe: bool,
    ) -> Result<Option<Duration>, String> {
        let mut c = self.conn().await.map_err(|e| e.to_string())?;
        let id = format!(
            "{}.{}",
            self.replica,
            FAILURE_IDS.fetch_add(1, Ordering::Relaxed)
        );
        let open: i64 = FAILED
            .key(self.breaker_key(provider, "failures"))
            .key(self.breaker_key(provider, "open"))
            .key(self.breaker_key(provider, "probe"))
            .arg(spec.window.as_millis() as i64)
            .arg(spec.failures)
            .arg(spec.cooldown.as_millis() as i64)
            .arg(id)
            .arg(if probe { "1" } else { "0" })
            .invoke_async(&mut c)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        Ok((open > 0).then(|| Duration::from_millis(open as u64)))
    }

    async fn answered(&self, provider: &str) -> Result<(), String> {
        let mut c = self.conn().await.map_err(|e| e.to_string())?;
        redis::cmd("DEL")
            .arg(self.breaker_key(provider, "failures"))
            .arg(self.breaker_key(provider, "open"))
            .arg(self.breaker_key(provider, "probe"))
            .query_async::<()>(&mut c)
            .await
            .map_err(|e| format!("redis: {e}"))
    }

    async fn open(&self, providers: &[String]) -> Result<Vec<Option<Duration>>, String> {
        let mut c = self.conn().await.map_err(|e| e.to_string())?;
        let mut pipe = redis::pipe();
        for p in providers {
            pipe.cmd("PTTL").arg(self.breaker_key(p, "open"));
        }
        let ttls: Vec<i64> = pipe
            .query_async(&mut c)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        Ok(ttls
            .into_iter()
            .map(|t| (t > 0).then(|| Duration::from_millis(t as u64)))
            .collect())
    }

    async fn abandon_probe(&self, provider: &str) -> Result<(), String> {
        let mut c = self.conn().await.map_err(|e| e.to_string())?;
        ABANDON
            .key(self.breaker_key(provider, "probe"))
            .arg(&self.replica)
            .invoke_async::<i64>(&mut c)
            .await
            .map(drop)
            .map_err(|e| format!("redis: {e}"))
    }

    async fn probe(&self, provider: &str, hold: Duration) -> Result<bool, String> {
        let mut c = self.conn().await.map_err(|e| e.to_string())?;
        let set: Option<String> = redis::cmd("SET")
            .arg(self.breaker_key(provider, "probe"))
            .arg(&self.replica)
            .arg("NX")
            .arg("PX")
            .arg(hold.as_millis().max(1) as i64)
            .query_async(&mut c)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        Ok(set.is_some())
    }
}
