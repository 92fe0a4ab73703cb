//! A tenant's model budgets per period counted in Redis (durable runs; see
//! `run::periods`): one hash per tenant and period,
//! `{prefix}:quota:{<hex tenant>}:spend:{period}:{n}` with `t` and `c`
//! (tokens and cost spent) and `ht` and `hc` (held by calls in flight),
//! expiring an hour after its period ends. A call's reservation is one
//! script over every period of its tenant (one hash tag: one slot); its
//! settlement another.

use std::sync::LazyLock;

use redis::Script;

use super::RedisRuns;
use crate::config::quota::PeriodBudget;
use crate::model::call::request::{PeriodHold, PeriodRefusal};
use crate::run::clock::now_ms;
use crate::run::periods::{Ask, Counters, bucket, fit, refusal};

static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[i]: a period's counters. ARGV[1] input tokens, ARGV[2] cap (-1:
-- none), ARGV[3] billionths per input token, ARGV[4] per output token,
-- ARGV[5] 1 when priced; then for each key its token limit, cost limit
-- (-1: none) and when it expires (ms). Returns {0, cap, held tokens, held
-- cost} when held, else {i, t, c, ht, hc} of the key that refuses.
local input = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local pin = tonumber(ARGV[3])
local pout = tonumber(ARGV[4])
local priced = ARGV[5] == '1'
for i = 1, #KEYS do
  local base = 5 + 3 * (i - 1)
  local tl = tonumber(ARGV[base + 1])
  local cl = tonumber(ARGV[base + 2])
  local v = redis.call('HMGET', KEYS[i], 't', 'c', 'ht', 'hc')
  local t, c, ht, hc = tonumber(v[1] or 0), tonumber(v[2] or 0), tonumber(v[3] or 0), tonumber(v[4] or 0)
  if tl >= 0 then
    local left = tl - t - ht
    if left <= input then
      return {i, t, c, ht, hc}
    end
    if cap < 0 or left - input < cap then
      cap = left - input
    end
  end
  if cl >= 0 then
    local left = cl - c - hc
    if not priced or left < input * pin + math.max(pout, 1) then
      return {i, t, c, ht, hc}
    end
    if pout > 0 then
      local room = math.floor((left - input * pin) / pout)
      if cap < 0 or room < cap then
        cap = room
      end
    end
  end
end
local out = math.max(cap, 0)
local held_t = input + out
local held_c = math.floor(input * pin + out * pout + 0.5)
for i = 1, #KEYS do
  redis.call('HINCRBY', KEYS[i], 'ht', held_t)
  redis.call('HINCRBY', KEYS[i], 'hc', held_c)
  redis.call('PEXPIREAT', KEYS[i], ARGV[5 + 3 * i])
end
return {0, cap, held_t, held_c}
",
    )
});

static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
-- KEYS[i]: the counters a call held; ARGV[1..2] what it held (tokens,
-- cost), ARGV[3..4] what it spent.
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('HINCRBY', KEYS[i], 'ht', -tonumber(ARGV[1]))
    redis.call('HINCRBY', KEYS[i], 'hc', -tonumber(ARGV[2]))
    redis.call('HINCRBY', KEYS[i], 't', ARGV[3])
    redis.call('HINCRBY', KEYS[i], 'c', ARGV[4])
  end
end
return 0
",
    )
});

fn bound(v: Option<u64>) -> i64 {
    v.map_or(-1, |n| n.min(i64::MAX as u64) as i64)
}

impl RedisRuns {
    /// Reserves `ask` against `tenant`'s period `budgets` for every
    /// replica.
    pub async fn reserve_periods(
        &self,
        tenant: &str,
        budgets: &[PeriodBudget],
        ask: Ask,
    ) -> Result<(PeriodHold, Option<u32>), PeriodRefusal> {
        let unreachable = |e: String| {
            PeriodRefusal::Unreachable(format!("the tenant's model budgets cannot be read: {e}"))
        };
        let mut c = self.conn().await.map_err(|e| unreachable(e.to_string()))?;
        let now = now_ms();
        let (pin, pout) = ask.price.unwrap_or((0.0, 0.0));
        let mut script = RESERVE.prepare_invoke();
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
            .arg(if ask.price.is_some() { "1" } else { "0" });
        for b in budgets {
            let (_, end) = bucket(b.period, now);
            script
                .arg(bound(b.tokens))
                .arg(bound(b.cost_nanos))
                .arg(end + 3_600_000);
        }
        let out: Vec<i64> = script
            .invoke_async(&mut c)
            .await
            .map_err(|e| unreachable(format!("redis: {e}")))?;
        let at = |i: usize| out.get(i).copied().unwrap_or(0).max(0) as u64;
        match out.first().copied().unwrap_or(0) {
            0 => Ok((
                PeriodHold {
                    keys,
                    tokens: at(2),
                    cost: at(3),
                },
                out.get(1)
                    .copied()
                    .filter(|c| *c >= 0)
                    .map(|c| c.min(i64::from(u32::MAX)) as u32),
            )),
            i => {
                let i = (i - 1).max(0) as usize;
                let counters = Counters {
                    tokens: at(1),
                    cost: at(2),
                    held_tokens: at(3),
                    held_cost: at(4),
                };
                // The same decision here names what refused it.
                debug_assert!(fit(&budgets[i..=i], &[counters], ask).is_err());
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
        let Ok(mut c) = self.conn().await else {
            return;
        };
        let mut script = SETTLE.prepare_invoke();
        for k in &hold.keys {
            script.key(k);
        }
        let settled: Result<i64, _> = script
            .arg(hold.tokens)
            .arg(hold.cost)
            .arg(tokens)
            .arg(cost)
            .invoke_async(&mut c)
            .await;
        if let Err(e) = settled {
            tracing::warn!(error = %e, "a model call's hold on its tenant's budgets was not settled");
        }
    }
}
