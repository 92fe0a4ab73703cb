//! A tenant's model budgets per period counted in Redis (durable runs; see
//! `run::periods`). Keys, per tenant (one hash tag: one slot):
//!
//! - `{prefix}:quota:{<hex tenant>}:spend:{period}:{n}` — a hash of `t`
//!   and `c` (tokens and cost spent) and `ht` and `hc` (held by calls in
//!   flight), expiring an hour after its period ends;
//! - `{prefix}:quota:{<hex tenant>}:holds` — the holds of calls in flight,
//!   a sorted set of hold ids by when each lapses (Redis's clock), and
//!   `…:holds:of`, a hash of what each holds and where.
//!
//! A call's reservation is one script over every period of its tenant: it
//! first gives back the holds that lapsed, then holds the call's worst
//! case. Its settlement is another, which gives the hold back once (a
//! hold that lapsed was given back already) and counts what it spent.
//! While a call is in flight its replica renews its hold (see
//! `durable::holds`); a replica that dies stops renewing, and its holds
//! lapse within `HOLD_TTL`, so a crash holds nothing for long.

use std::{
    sync::{
        LazyLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use baton_store::redis::conn::Connection;
use redis::Script;

use super::clock::now_ms;
use super::{NOW, SharedState, holds::HOLD_TTL};
use crate::config::quota::PeriodBudget;
use crate::model::call::period::{Ask, Counters, bucket, fit, refusal};
use crate::model::call::request::{PeriodHold, PeriodRefusal};

/// Gives back the holds that lapsed (KEYS[1] the holds, KEYS[2] what each
/// holds), before a reservation and when listing.
const LAPSE: &str = r"
local function lapse()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  for _, id in ipairs(gone) do
    local info = redis.call('HGET', KEYS[2], id)
    if info then
      local parts = {}
      for part in string.gmatch(info, '[^\n]+') do
        parts[#parts + 1] = part
      end
      for k = 3, #parts do
        if redis.call('EXISTS', parts[k]) == 1 then
          redis.call('HINCRBY', parts[k], 'ht', 0 - tonumber(parts[1]))
          redis.call('HINCRBY', parts[k], 'hc', 0 - tonumber(parts[2]))
        end
      end
    end
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
  end
end
";

static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{NOW}{LAPSE}{}",
        r"
-- KEYS[1] holds, KEYS[2] what each holds, KEYS[2+i]: a period's counters.
-- ARGV[1] input tokens, ARGV[2] cap (-1: none), ARGV[3] billionths per
-- input token, ARGV[4] per output token, ARGV[5] 1 when priced, ARGV[6] 1
-- when patient, ARGV[7] the hold's id, ARGV[8] its time to live (ms); then
-- for each period its token limit, cost limit (-1: none) and when it
-- expires (ms). Returns {0, cap, held tokens, held cost} when held, {-1}
-- when a patient call must wait for calls in flight, else {i, t, c, ht,
-- hc} of the period that refuses.
lapse()
local input = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local pin = tonumber(ARGV[3])
local pout = tonumber(ARGV[4])
local priced = ARGV[5] == '1'
local huge = 9007199254740991
if want < 0 then want = huge end
local cap, free = want, want
local refusing = nil
local input_cost = input * pin
local n = #KEYS - 2
for i = 1, n do
  local key = KEYS[2 + i]
  local base = 8 + 3 * (i - 1)
  local tl = tonumber(ARGV[base + 1])
  local cl = tonumber(ARGV[base + 2])
  local v = redis.call('HMGET', key, 't', 'c', 'ht', 'hc')
  local t, c, ht, hc = tonumber(v[1] or 0), tonumber(v[2] or 0), tonumber(v[3] or 0), tonumber(v[4] or 0)
  if tl >= 0 then
    local room = tl - t
    if room <= input then
      return {i, t, c, ht, hc}
    end
    free = math.min(free, room - input)
    local left = room - ht
    if left <= input then
      refusing = refusing or {i, t, c, ht, hc}
      cap = 0
    else
      cap = math.min(cap, left - input)
    end
  end
  if cl >= 0 then
    local room = cl - c
    if not priced or room < input_cost + math.max(pout, 1) then
      return {i, t, c, ht, hc}
    end
    if pout > 0 then
      free = math.min(free, math.floor((room - input_cost) / pout))
    end
    local left = room - hc
    if left < input_cost + math.max(pout, 1) then
      refusing = refusing or {i, t, c, ht, hc}
      cap = 0
    elseif pout > 0 then
      cap = math.min(cap, math.floor((left - input_cost) / pout))
    end
  end
end
if cap < free and ARGV[6] == '1' then
  return {-1}
end
if refusing then
  return refusing
end
local out = cap
if cap == huge then out = 0 end
local held_t = input + out
local held_c = math.floor(input_cost + out * pout + 0.5)
local info = held_t .. '\n' .. held_c
local last = 0
for i = 1, n do
  local key = KEYS[2 + i]
  redis.call('HINCRBY', key, 'ht', held_t)
  redis.call('HINCRBY', key, 'hc', held_c)
  local ends = tonumber(ARGV[8 + 3 * i])
  redis.call('PEXPIREAT', key, ends)
  last = math.max(last, ends)
  info = info .. '\n' .. key
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[8]), ARGV[7])
redis.call('HSET', KEYS[2], ARGV[7], info)
-- The holds live as long as the counters they hold on.
for k = 1, 2 do
  if redis.call('PEXPIRETIME', KEYS[k]) < last then
    redis.call('PEXPIREAT', KEYS[k], last)
  end
end
if cap == huge then cap = -1 end
return {0, cap, held_t, held_c}
"
    ))
});

static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[1] holds, KEYS[2] what each holds, KEYS[2+i] the counters the
-- call's hold is on; ARGV[1] the hold's id, ARGV[2..3] what the call
-- spent. What it held is read from its entry: a hold that lapsed was given
-- back already, and one whose reservation's reply was never read (the
-- call was dropped meanwhile) is given back all the same.
local info = redis.call('HGET', KEYS[2], ARGV[1])
local live = redis.call('ZREM', KEYS[1], ARGV[1]) == 1
redis.call('HDEL', KEYS[2], ARGV[1])
local ht, hc = 0, 0
if live and info then
  local parts = {}
  for part in string.gmatch(info, '[^\n]+') do
    parts[#parts + 1] = part
  end
  ht, hc = tonumber(parts[1]), tonumber(parts[2])
end
for i = 3, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if ht ~= 0 or hc ~= 0 then
      redis.call('HINCRBY', KEYS[i], 'ht', 0 - ht)
      redis.call('HINCRBY', KEYS[i], 'hc', 0 - hc)
    end
    redis.call('HINCRBY', KEYS[i], 't', ARGV[2])
    redis.call('HINCRBY', KEYS[i], 'c', ARGV[3])
  end
end
return live and 1 or 0
",
    )
});

static HOLD_IDS: AtomicU64 = AtomicU64::new(0);

/// Gives hold `id` (on `holds`, over counters `keys`) back, counting what
/// its call spent.
async fn settle(conn: &Connection, holds: &str, keys: &[String], id: &str, spent: (u64, u64)) {
    let settled = match conn.get().await {
        Ok(mut c) => {
            let mut script = SETTLE.prepare_invoke();
            script.key(holds).key(format!("{holds}:of"));
            for k in keys {
                script.key(k);
            }
            script
                .arg(id)
                .arg(spent.0)
                .arg(spent.1)
                .invoke_async::<i64>(&mut c)
                .await
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = settled {
        // Its hold lapses by itself within HOLD_TTL.
        tracing::warn!(error = %e, "a model call's hold on its tenant's budgets was not settled");
    }
}

/// A reservation whose reply has not been read: dropped so, the hold it
/// may have taken is given back in the background.
struct InFlight<'a> {
    conn: &'a Connection,
    holds: &'a str,
    keys: &'a [String],
    id: &'a str,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let conn = self.conn.clone();
            let (holds, keys, id) = (
                self.holds.to_owned(),
                self.keys.to_vec(),
                self.id.to_owned(),
            );
            handle.spawn(async move { settle(&conn, &holds, &keys, &id, (0, 0)).await });
        }
    }
}

fn bound(v: Option<u64>) -> i64 {
    v.map_or(-1, |n| n.min(i64::MAX as u64) as i64)
}

impl SharedState {
    /// Reserves `ask` against `tenant`'s period `budgets` for every
    /// replica; while calls in flight keep it from its whole cap it waits
    /// for them to settle (looking again every 50 ms to 1 s), until
    /// `deadline`.
    pub async fn reserve_periods(
        &self,
        tenant: &str,
        budgets: &[PeriodBudget],
        ask: Ask,
        deadline: Instant,
    ) -> Result<(PeriodHold, Option<u32>), PeriodRefusal> {
        let mut pause = Duration::from_millis(50);
        loop {
            let patient = Instant::now() < deadline;
            match self.try_reserve(tenant, budgets, ask, patient).await? {
                Some(held) => return Ok(held),
                None => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(pause.min(left)).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// One try: the hold, or `None` when a patient call must wait.
    async fn try_reserve(
        &self,
        tenant: &str,
        budgets: &[PeriodBudget],
        ask: Ask,
        patient: bool,
    ) -> Result<Option<(PeriodHold, Option<u32>)>, PeriodRefusal> {
        let unreachable = |e: String| {
            PeriodRefusal::Unreachable(format!("the tenant's model budgets cannot be read: {e}"))
        };
        let mut c = self.conn().await.map_err(|e| unreachable(e.to_string()))?;
        let now = now_ms();
        let (pin, pout) = ask.price.unwrap_or((0.0, 0.0));
        let holds = self.quota_key(tenant, "holds");
        let id = format!(
            "{}.{}",
            self.replica,
            HOLD_IDS.fetch_add(1, Ordering::Relaxed)
        );
        let mut script = RESERVE.prepare_invoke();
        script.key(&holds).key(format!("{holds}:of"));
        let mut keys = Vec::new();
        for b in budgets {
            let (n, _) = bucket(b.period, now);
            let key = self.quota_key(tenant, &format!("spend:{}:{n}", b.period.as_str()));
            script.key(&key);
            keys.push(key);
        }
        script
            .arg(ask.input)
            .arg(ask.cap.map_or(-1, i64::from))
            .arg(pin)
            .arg(pout)
            .arg(if ask.price.is_some() { "1" } else { "0" })
            .arg(if patient { "1" } else { "0" })
            .arg(&id)
            .arg(HOLD_TTL.as_millis() as i64);
        for b in budgets {
            let (_, end) = bucket(b.period, now);
            script
                .arg(bound(b.tokens))
                .arg(bound(b.cost_nanos))
                .arg(end + 3_600_000);
        }
        // Dropped before its reply is read, the hold it may have taken is
        // given back (after it, on the same connection).
        let mut in_flight = InFlight {
            conn: &self.conn,
            holds: &holds,
            keys: &keys,
            id: &id,
            done: false,
        };
        let out: Vec<i64> = script
            .invoke_async(&mut c)
            .await
            .map_err(|e| unreachable(format!("redis: {e}")))?;
        in_flight.done = true;
        drop(in_flight);
        let at = |i: usize| out.get(i).copied().unwrap_or(0).max(0) as u64;
        match out.first().copied().unwrap_or(0) {
            -1 => Ok(None),
            0 => {
                self.holds.add(&holds, &id, &self.conn);
                Ok(Some((
                    PeriodHold {
                        tenant: tenant.to_owned(),
                        keys,
                        tokens: at(2),
                        cost: at(3),
                        holds,
                        id,
                    },
                    out.get(1)
                        .copied()
                        .filter(|c| *c >= 0)
                        .map(|c| c.min(i64::from(u32::MAX)) as u32),
                )))
            }
            i => {
                let i = (i - 1).max(0) as usize;
                let counters = Counters {
                    tokens: at(1),
                    cost: at(2),
                    held_tokens: at(3),
                    held_cost: at(4),
                };
                // The same decision here names what refused it.
                debug_assert!(fit(&budgets[i..=i], &[counters], ask, false).is_err());
                Err(PeriodRefusal::Exhausted(refusal(
                    tenant,
                    &budgets[i],
                    &counters,
                    ask,
                )))
            }
        }
    }

    /// Settles a call's `hold` to what it spent.
    pub async fn settle_periods(&self, hold: &PeriodHold, tokens: u64, cost: u64) {
        self.holds.remove(&hold.holds, &hold.id);
        settle(
            &self.conn,
            &hold.holds,
            &hold.keys,
            &hold.id,
            (tokens, cost),
        )
        .await;
    }
}
