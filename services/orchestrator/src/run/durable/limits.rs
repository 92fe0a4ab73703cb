//! Provider rate limits counted in Redis (durable runs), so that every
//! replica counts in one window: a sliding log per limit, one Lua script
//! per call (see `model::call::limit`).
//!
//! Keys (one hash tag per limit, so one script sees both):
//!
//! - `{prefix}:ratelimit:{<hex key>}:r` — a sorted set of the calls let
//!   through, scored by when (Redis's clock, ms).
//! - `{prefix}:ratelimit:{<hex key>}:t` — the same calls as `id:tokens`,
//!   for a token limit.
//!
//! Both expire a window after their last call; entries older than the
//! window are dropped by the next call.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::{RedisRuns, lease::NOW};
use crate::model::call::limit::{Want, Window};

static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{}",
        r"
-- KEYS[1] calls, KEYS[2] tokens; ARGV[1] window (ms), ARGV[2] most calls
-- (-1: none), ARGV[3] most tokens (-1: none), ARGV[4] this call's tokens,
-- ARGV[5] its id. Returns 0 when counted, else the ms to wait.
local w = tonumber(ARGV[1])
local maxr = tonumber(ARGV[2])
local maxt = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - w)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - w)
local wait = 0
if maxr >= 0 then
  local n = redis.call('ZCARD', KEYS[1])
  if n >= maxr then
    local e = redis.call('ZRANGE', KEYS[1], n - maxr, n - maxr, 'WITHSCORES')
    wait = tonumber(e[2]) + w - now
  end
end
if maxt >= 0 then
  local all = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  local used = 0
  for i = 1, #all, 2 do
    used = used + tonumber(string.match(all[i], ':(%d+)$'))
  end
  if used + want > maxt then
    local over = used + want - maxt
    for i = 1, #all, 2 do
      over = over - tonumber(string.match(all[i], ':(%d+)$'))
      if over <= 0 then
        wait = math.max(wait, tonumber(all[i + 1]) + w - now)
        break
      end
    end
  end
end
if wait > 0 then
  return math.max(wait, 1)
end
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('PEXPIRE', KEYS[1], w)
if maxt >= 0 then
  redis.call('ZADD', KEYS[2], now, ARGV[5] .. ':' .. want)
  redis.call('PEXPIRE', KEYS[2], w)
end
return 0
"
    ))
});

static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1] tokens; ARGV[1] id, ARGV[2] tokens counted, ARGV[3] used.
local old = ARGV[1] .. ':' .. ARGV[2]
local at = redis.call('ZSCORE', KEYS[1], old)
if at then
  redis.call('ZREM', KEYS[1], old)
  redis.call('ZADD', KEYS[1], at, ARGV[1] .. ':' .. ARGV[3])
end
return 0
",
    )
});

impl RedisRuns {
    fn limit_key(&self, key: &str, what: &str) -> String {
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}:ratelimit:{{{hex}}}:{what}", self.config.key_prefix)
    }
}

fn bound(v: Option<u64>) -> i64 {
    v.map_or(-1, |n| n.min(i64::MAX as u64) as i64)
}

#[async_trait::async_trait]
impl Window for RedisRuns {
    async fn take(&self, key: &str, id: &str, want: &Want) -> Result<Option<Duration>, String> {
        let mut c = self.conn().await.map_err(|e| e.to_string())?;
        let wait: i64 = TAKE
            .key(self.limit_key(key, "r"))
            .key(self.limit_key(key, "t"))
            .arg(want.window.as_millis() as i64)
            .arg(bound(want.requests))
            .arg(bound(want.tokens))
            .arg(want.cost)
            .arg(id)
            .invoke_async(&mut c)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        Ok((wait > 0).then(|| Duration::from_millis(wait as u64)))
    }

    async fn settle(&self, key: &str, id: &str, counted: u64, used: u64) {
        let Ok(mut c) = self.conn().await else {
            return;
        };
        let settled: Result<i64, _> = SETTLE
            .key(self.limit_key(key, "t"))
            .arg(id)
            .arg(counted)
            .arg(used)
            .invoke_async(&mut c)
            .await;
        if let Err(e) = settled {
            tracing::warn!(limit = key, error = %e, "a rate limit's tokens were not settled");
        }
    }
}
