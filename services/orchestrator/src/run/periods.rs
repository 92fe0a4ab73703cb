//! A tenant's model budgets per period (`quotas.*.model_tokens_per_day`,
//! `…_per_month`, `model_cost_per_hour`, `…_per_day`, `…_per_month`):
//! calendar periods in UTC, counted where every replica counts them (Redis
//! with durable runs, see `shared_state::periods`; this process else, here).
//! The rules — what fits, what a refusal says — are `model::call::period`'s.
//!
//! Each period's counters are what calls spent and what calls in flight
//! hold. A call reserves its input and the most output tokens it may write
//! against every period budget of its tenant, its `max_tokens` capped at
//! what they have left, or is refused (`RESOURCE_EXHAUSTED`, naming the
//! quota); after it answered the hold is settled to what it spent. A
//! period's counters leave an hour after the period ends.

use std::{collections::HashMap, sync::Mutex};

use crate::config::quota::PeriodBudget;
use crate::model::call::period::{Ask, Counters, Short, bucket, fit, refusal};
use crate::model::call::request::{PeriodHold, PeriodRefusal};

use super::clock::now_ms;

/// By tenant and period: the period's number and its counters.
type ByTenant = HashMap<(String, &'static str), (i64, Counters)>;

/// A tenant's period counters in this process (memory mode).
#[derive(Default)]
pub struct LocalPeriods {
    counters: Mutex<ByTenant>,
    /// A hold was settled or released: calls waiting for room look again.
    settled: tokio::sync::Notify,
}

impl LocalPeriods {
    /// Reserves `ask` against `tenant`'s `budgets`; while calls in flight
    /// keep it from its whole cap it waits for them, until `deadline`.
    pub async fn reserve(
        &self,
        tenant: &str,
        budgets: &[PeriodBudget],
        ask: Ask,
        deadline: std::time::Instant,
    ) -> Result<(PeriodHold, Option<u32>), PeriodRefusal> {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let patient = std::time::Instant::now() < deadline;
            match self.try_reserve(tenant, budgets, ask, patient) {
                Err(Short::Held) => {
                    let _ = tokio::time::timeout_at(deadline.into(), settled).await;
                }
                Err(Short::Budget(i)) => {
                    let counters = self.counters_of(tenant, &budgets[i]);
                    return Err(PeriodRefusal::Exhausted(refusal(
                        tenant,
                        &budgets[i],
                        &counters,
                        ask,
                    )));
                }
                Ok(held) => return Ok(held),
            }
        }
    }

    fn all(&self) -> std::sync::MutexGuard<'_, ByTenant> {
        self.counters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn counters_of(&self, tenant: &str, b: &PeriodBudget) -> Counters {
        let (n, _) = bucket(b.period, now_ms());
        self.all()
            .get(&(tenant.to_owned(), b.period.as_str()))
            .filter(|e| e.0 == n)
            .map(|e| e.1)
            .unwrap_or_default()
    }

    fn try_reserve(
        &self,
        tenant: &str,
        budgets: &[PeriodBudget],
        ask: Ask,
        patient: bool,
    ) -> Result<(PeriodHold, Option<u32>), Short> {
        let now = now_ms();
        let mut all = self.all();
        let mut keys = Vec::new();
        let mut counters = Vec::new();
        for b in budgets {
            let (n, _) = bucket(b.period, now);
            let entry = all
                .entry((tenant.to_owned(), b.period.as_str()))
                .or_insert((n, Counters::default()));
            if entry.0 != n {
                *entry = (n, Counters::default());
            }
            keys.push(format!("{tenant}\n{}\n{n}", b.period.as_str()));
            counters.push(entry.1);
        }
        let (cap, tokens, cost) = fit(budgets, &counters, ask, patient)?;
        for b in budgets {
            if let Some(e) = all.get_mut(&(tenant.to_owned(), b.period.as_str())) {
                e.1.held_tokens += tokens;
                e.1.held_cost += cost;
            }
        }
        Ok((
            PeriodHold {
                tenant: tenant.to_owned(),
                keys,
                tokens,
                cost,
                ..Default::default()
            },
            cap,
        ))
    }

    /// Settles `hold` to what the call spent; calls waiting look again.
    pub fn settle(&self, hold: &PeriodHold, tokens: u64, cost: u64) {
        let mut all = self.all();
        for key in &hold.keys {
            let mut parts = key.split('\n');
            let (Some(tenant), Some(period), Some(n)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let period = ["hour", "day", "month"]
                .into_iter()
                .find(|p| *p == period)
                .unwrap_or("hour");
            if let Some(e) = all.get_mut(&(tenant.to_owned(), period))
                && e.0.to_string() == n
            {
                e.1.held_tokens = e.1.held_tokens.saturating_sub(hold.tokens);
                e.1.held_cost = e.1.held_cost.saturating_sub(hold.cost);
                e.1.tokens += tokens;
                e.1.cost += cost;
            }
        }
        drop(all);
        self.settled.notify_waiters();
    }

    /// What calls in flight hold of every tenant's budgets: tokens and
    /// cost (what `/metrics` shows as `baton_model_budget_held`).
    pub fn held(&self) -> Vec<(String, &'static str, Counters)> {
        self.all()
            .iter()
            .map(|((t, p), (_, c))| (t.clone(), *p, *c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::quota::Period;

    #[tokio::test]
    async fn local_counters_hold_then_settle() {
        let local = LocalPeriods::default();
        let budgets = [PeriodBudget {
            period: Period::Hour,
            tokens: Some(300),
            cost_nanos: None,
        }];
        let ask = Ask {
            input: 100,
            cap: Some(100),
            price: None,
        };
        let now = std::time::Instant::now();
        let far = now + std::time::Duration::from_secs(30);
        let (first, cap) = local.reserve("", &budgets, ask, far).await.expect("first");
        assert_eq!((cap, first.tokens), (Some(100), 200));
        // 100 left above the first's hold: not enough for 100 in and 1 out,
        // now; a patient call waits for the first to settle.
        let refused = local.reserve("", &budgets, ask, now).await;
        assert_eq!(
            refused,
            Err(PeriodRefusal::Exhausted("quotas.model_tokens_per_hour: the default tenant: 0 of 300 tokens spent this UTC hour (200 more held by calls in flight); the next model call needs at least 101".into()))
        );
        let waiting = local.reserve("", &budgets, ask, far);
        tokio::pin!(waiting);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), waiting.as_mut())
                .await
                .is_err()
        );
        local.settle(&first, 120, 0);
        // 180 left: 100 in, and 80 out at most.
        let (second, cap) = waiting.await.expect("after the settle");
        assert_eq!(cap, Some(80));
        local.settle(&second, 0, 0);
        assert_eq!(local.held()[0].2.held_tokens, 0);
    }
}
