//! Provider rate limits counted in Redis (durable runs), so that every
//! replica counts in one window: a sliding log per limit, taken a lease at
//! a time (see [`LeasedWindows`] and `model::call::limit`).
//!
//! Keys (one hash tag per limit, so one script sees both):
//!
//! - `{prefix}:ratelimit:{<hex key>}:r` — a sorted set of the calls leased,
//!   scored by when (Redis's clock, ms): `{lease}#{n}`.
//! - `{prefix}:ratelimit:{<hex key>}:t` — the tokens they count, for a
//!   token limit: `{lease}:{tokens}`, and `{call}+:{tokens}` for what a
//!   call used over what it counted.
//!
//! Both expire a window (and a lease's hold) after their last lease;
//! entries older than that are dropped by the next lease.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use redis::Script;

use super::{NOW, SharedState, hex};
use crate::model::call::limit::{Want, Window};

static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{}",
        r"
-- KEYS[1] calls, KEYS[2] tokens; ARGV[1] window (ms, with the lease's
-- hold), ARGV[2] most calls (-1: none), ARGV[3] most tokens (-1: none),
-- ARGV[4] tokens a call counts, ARGV[5] the lease's id, ARGV[6] calls it
-- asks for. Returns the calls leased (with their tokens), or minus the ms
-- to wait for one.
local w = tonumber(ARGV[1])
local maxr = tonumber(ARGV[2])
local maxt = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local grant = tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - w)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - w)
local wait = 0
if maxr >= 0 then
  local n = redis.call('ZCARD', KEYS[1])
  grant = math.min(grant, maxr - n)
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
  if want > 0 then
    grant = math.min(grant, math.floor((maxt - used) / want))
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
if grant <= 0 then
  return -math.max(wait, 1)
end
for i = 1, grant do
  redis.call('ZADD', KEYS[1], now, ARGV[5] .. '#' .. i)
end
redis.call('PEXPIRE', KEYS[1], w)
if maxt >= 0 then
  redis.call('ZADD', KEYS[2], now, ARGV[5] .. ':' .. (grant * want))
  redis.call('PEXPIRE', KEYS[2], w)
end
return grant
"
    ))
});

static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1] calls, KEYS[2] tokens; ARGV[1] the lease's id, ARGV[2] calls it
-- counted, ARGV[3] of them unused, ARGV[4] tokens it counted, ARGV[5] the
-- tokens it keeps.
local counted = tonumber(ARGV[2])
for i = counted - tonumber(ARGV[3]) + 1, counted do
  redis.call('ZREM', KEYS[1], ARGV[1] .. '#' .. i)
end
local old = ARGV[1] .. ':' .. ARGV[4]
local at = redis.call('ZSCORE', KEYS[2], old)
if at and ARGV[5] ~= ARGV[4] then
  redis.call('ZREM', KEYS[2], old)
  redis.call('ZADD', KEYS[2], at, ARGV[1] .. ':' .. ARGV[5])
end
return 0
",
    )
});

static OVERRUN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{}",
        r"
-- KEYS[1] tokens; ARGV[1] the call's id, ARGV[2] tokens it used over
-- what it counted.
redis.call('ZADD', KEYS[1], now, ARGV[1] .. '+:' .. ARGV[2])
return 0
"
    ))
});

impl SharedState {
    fn limit_key(&self, key: &str, what: &str) -> String {
        self.key("ratelimit", &hex(key), what)
    }
}

fn bound(v: Option<u64>) -> i64 {
    v.map_or(-1, |n| n.min(i64::MAX as u64) as i64)
}

/// Permits a replica leases from a shared window at once, at most.
const MOST_A_LEASE: u64 = 16;

/// How many calls one lease asks for: a twentieth of the limit's calls
/// (so replicas share a limit in small slices), 1 to [`MOST_A_LEASE`].
fn batch(want: &Want) -> u64 {
    want.requests
        .map_or(MOST_A_LEASE, |r| (r / 20).clamp(1, MOST_A_LEASE))
}

/// How long a lease's permits may be used: a tenth of the window, at most
/// a second. The window counts a lease that much longer, so the calls sent
/// within any window are still at most its limit.
fn hold(window: Duration) -> Duration {
    (window / 10).min(Duration::from_secs(1))
}

/// What this replica holds of one limit: the permits of its last lease.
#[derive(Default)]
struct Pool {
    /// The lease's id ("" before the first).
    lease: String,
    /// Until when its permits may be used (from when it was asked for).
    until: Option<Instant>,
    /// Calls it counted, and those not used yet.
    counted: u64,
    calls: u64,
    /// Tokens it counted (as its entry in the token set says), and those
    /// not used yet.
    counted_tokens: u64,
    tokens: u64,
    /// The calls let through on it, with the tokens each counted: their
    /// settling gives unused tokens back to it while it holds.
    on_it: HashMap<String, u64>,
}

/// A shared window taken a lease at a time: one script leases a batch of
/// permits (calls and the tokens they count) for this replica, which lets
/// calls through on them without asking Redis again until they run out or
/// the lease's hold passes; what a lease did not use is given back off the
/// call's path. Exact across replicas: a lease counts in the window from
/// when it was taken for the window plus its hold, and its permits are
/// used within the hold.
pub struct LeasedWindows {
    runs: Arc<SharedState>,
    pools: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Pool>>>>,
}

impl LeasedWindows {
    /// Windows counted in `runs`' Redis.
    pub fn new(runs: Arc<SharedState>) -> Self {
        Self {
            runs,
            pools: Mutex::default(),
        }
    }

    fn pool(&self, key: &str) -> Arc<tokio::sync::Mutex<Pool>> {
        self.pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_owned())
            .or_default()
            .clone()
    }

    /// Gives back, off the call's path, what `pool`'s lease did not use.
    fn give_back(&self, key: &str, pool: &mut Pool) {
        give_back(&self.runs, key, pool);
    }
}

/// Gives back, off the call's path, what `pool`'s lease did not use.
fn give_back(runs: &Arc<SharedState>, key: &str, pool: &mut Pool) {
    {
        if pool.lease.is_empty() || (pool.calls == 0 && pool.tokens == 0) {
            return;
        }
        let runs = runs.clone();
        let (calls, tokens) = (runs.limit_key(key, "r"), runs.limit_key(key, "t"));
        let (lease, counted, unused) = (pool.lease.clone(), pool.counted, pool.calls);
        let (counted_tokens, kept) = (pool.counted_tokens, pool.counted_tokens - pool.tokens);
        pool.calls = 0;
        pool.tokens = 0;
        tokio::spawn(async move {
            let Ok(mut c) = runs.conn().await else {
                return;
            };
            let given: Result<i64, _> = GIVE_BACK
                .key(calls)
                .key(tokens)
                .arg(&lease)
                .arg(counted)
                .arg(unused)
                .arg(counted_tokens)
                .arg(kept)
                .invoke_async(&mut c)
                .await;
            if let Err(e) = given {
                tracing::debug!(error = %e, "a rate limit lease's unused permits were not given back");
            }
        });
    }
}

#[async_trait::async_trait]
impl Window for LeasedWindows {
    async fn take(&self, key: &str, id: &str, want: &Want) -> Result<Option<Duration>, String> {
        let pool = self.pool(key);
        let mut p = pool.lock().await;
        let tokens = want.tokens.is_some();
        if p.until.is_some_and(|u| Instant::now() < u)
            && p.calls > 0
            && (!tokens || p.tokens >= want.cost)
        {
            p.calls -= 1;
            if tokens {
                p.tokens -= want.cost;
                p.on_it.insert(id.to_owned(), want.cost);
            }
            return Ok(None);
        }
        self.give_back(key, &mut p);
        let hold = hold(want.window);
        let sent = Instant::now();
        let mut c = self.runs.conn().await.map_err(|e| e.to_string())?;
        let granted: i64 = TAKE
            .key(self.runs.limit_key(key, "r"))
            .key(self.runs.limit_key(key, "t"))
            .arg((want.window + hold).as_millis() as i64)
            .arg(bound(want.requests))
            .arg(bound(want.tokens))
            .arg(want.cost)
            .arg(id)
            .arg(batch(want))
            .invoke_async(&mut c)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        if granted <= 0 {
            return Ok(Some(Duration::from_millis(granted.unsigned_abs().max(1))));
        }
        let granted = granted as u64;
        let counted_tokens = if tokens { granted * want.cost } else { 0 };
        *p = Pool {
            lease: id.to_owned(),
            until: Some(sent + hold),
            counted: granted,
            calls: granted - 1,
            counted_tokens,
            tokens: counted_tokens.saturating_sub(want.cost),
            on_it: HashMap::new(),
        };
        if tokens {
            p.on_it.insert(id.to_owned(), want.cost);
        }
        // When the hold ends what the lease did not use goes back, so an
        // idle replica strands no permits.
        if p.calls > 0 || p.tokens > 0 {
            let (runs, key, lease) = (self.runs.clone(), key.to_owned(), id.to_owned());
            let pool = pool.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until((sent + hold).into()).await;
                let mut p = pool.lock().await;
                if p.lease == lease {
                    give_back(&runs, &key, &mut p);
                }
            });
        }
        Ok(None)
    }

    async fn settle(&self, key: &str, id: &str, counted: u64, used: u64) {
        let pool = self.pool(key);
        let mut p = pool.lock().await;
        // Let through on the lease this replica holds now, or an earlier.
        let on_it = p.on_it.remove(id);
        let counted = on_it.unwrap_or(counted);
        if used <= counted {
            // What it did not use goes back to the lease while it holds;
            // else it is counted until the window passes (never too few).
            if on_it.is_some() && p.until.is_some_and(|u| Instant::now() < u) {
                p.tokens += counted - used;
            }
            return;
        }
        drop(p);
        // It used more than it counted: an entry of its own counts the rest.
        let Ok(mut c) = self.runs.conn().await else {
            return;
        };
        let settled: Result<i64, _> = OVERRUN
            .key(self.runs.limit_key(key, "t"))
            .arg(id)
            .arg(used - counted)
            .invoke_async(&mut c)
            .await;
        if let Err(e) = settled {
            tracing::warn!(limit = key, error = %e, "a rate limit's tokens were not settled");
        }
    }
}
