//! Per-tenant quotas of runs (`quotas.*`): runs not ended
//! (`concurrent_runs`), runs waiting for a person (`parked_runs`) and model
//! tokens per hour (`model_tokens_per_hour`).
//!
//! A new run is refused with `RESOURCE_EXHAUSTED` naming the quota when its
//! tenant is at any of them, and nothing starts. A model turn of a run whose
//! tenant used its tokens of the last hour is refused the same way (the run
//! fails with that code); a run already going may still ask people (a
//! refusal then would throw its work away) — `parked_runs` stops new runs
//! while that many wait, so people answer before more pile up.
//!
//! With durable runs (`runs.store = "redis"`) usage is counted in Redis
//! (see `shared_state::quota`), so the quotas hold across replicas; else in
//! this process. Either way each replica exports its own share per tenant:
//! `baton_tenant_runs`, `baton_tenant_runs_waiting` (gauges),
//! `baton_tenant_model_tokens_total` and `baton_quota_refusals_total`
//! (`tenant`, `quota`).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
};

use baton_common::quota::exceeded;

use super::durable::now_ms;
use crate::catalog::prices::Price;
use crate::config::quota::PeriodBudget;
use crate::model::call::request::{PeriodHold, PeriodRefusal, Periods};
use crate::shared_state::{
    SharedState,
    quota::{AdmitLimits, Admitted},
};
use crate::{
    config::{QuotaConfig, RunQuota},
    error::Error,
    metrics::QuotaMetrics,
};

/// This process's view of one tenant.
#[derive(Default)]
struct Local {
    /// Its runs here, not ended.
    runs: HashSet<String>,
    /// Its runs here waiting for people: open questions per run.
    waiting: HashMap<String, usize>,
    /// Tokens by minute (Unix), the last hour.
    tokens: VecDeque<(i64, u64)>,
}

impl Local {
    fn tokens_used(&mut self, minute: i64) -> u64 {
        while self.tokens.front().is_some_and(|(m, _)| *m <= minute - 60) {
            self.tokens.pop_front();
        }
        self.tokens.iter().map(|(_, n)| n).sum()
    }
}

/// The quotas and their usage.
pub struct RunQuotas {
    config: QuotaConfig,
    local: Mutex<HashMap<String, Local>>,
    durable: Option<Arc<SharedState>>,
    metrics: QuotaMetrics,
    /// The tenants' model budgets per period, in memory mode.
    periods: super::periods::LocalPeriods,
}

fn limit(v: Option<u64>) -> i64 {
    v.map_or(-1, |n| n.min(i64::MAX as u64) as i64)
}

fn tenant_label(tenant: &str) -> Vec<(&'static str, String)> {
    vec![("tenant", tenant.to_owned())]
}

impl RunQuotas {
    /// Quotas of `config`, counted in `durable`'s Redis when runs are
    /// durable, reported to `metrics`.
    pub fn new(
        config: QuotaConfig,
        durable: Option<Arc<SharedState>>,
        metrics: QuotaMetrics,
    ) -> Self {
        Self {
            config,
            local: Mutex::default(),
            durable,
            metrics,
            periods: Default::default(),
        }
    }

    /// No limits (tests, tools).
    pub fn unlimited() -> Self {
        Self::new(QuotaConfig::default(), None, QuotaMetrics::default())
    }

    fn local<R>(&self, tenant: &str, f: impl FnOnce(&mut Local) -> R) -> R {
        let mut all = self.local.lock().unwrap_or_else(|p| p.into_inner());
        f(all.entry(tenant.to_owned()).or_default())
    }

    fn refused(&self, tenant: &str, quota: &'static str, limit: u64, what: String) -> Error {
        self.metrics
            .refusals
            .get_or_create(&vec![
                ("tenant", tenant.to_owned()),
                ("quota", quota.to_owned()),
            ])
            .inc();
        Error::Exhausted {
            field: format!("quotas.{quota}").into(),
            message: exceeded(tenant, limit, &what),
        }
    }

    /// Counts a new run of `tenant` that may last until `deadline_ms`, or
    /// refuses it (`RESOURCE_EXHAUSTED` naming the quota) when the tenant
    /// is at one of its quotas. `UNAVAILABLE` when Redis does not answer.
    pub async fn admit(&self, tenant: &str, run_id: &str, deadline_ms: i64) -> Result<(), Error> {
        let q = self.config.of(tenant);
        if let Some(durable) = &self.durable {
            if q.concurrent_runs.is_none()
                && q.parked_runs.is_none()
                && q.model_tokens_per_hour.is_none()
            {
                self.started(tenant, run_id);
                return Ok(());
            }
            let limits = AdmitLimits {
                runs: limit(q.concurrent_runs),
                waiting: limit(q.parked_runs),
                tokens: limit(q.model_tokens_per_hour),
            };
            let admitted = durable.admit(tenant, run_id, deadline_ms, limits).await?;
            return match admitted {
                Admitted::Yes => {
                    self.started(tenant, run_id);
                    Ok(())
                }
                Admitted::Runs(n) => Err(self.runs_refusal(tenant, &q, n)),
                Admitted::Waiting(n) => Err(self.waiting_refusal(tenant, &q, n)),
                Admitted::Tokens(n) => Err(self.tokens_refusal(tenant, &q, n)),
            };
        }
        let minute = now_ms() / 60_000;
        let mut all = self.local.lock().unwrap_or_else(|p| p.into_inner());
        let local = all.entry(tenant.to_owned()).or_default();
        let runs = local.runs.len() as u64;
        if q.concurrent_runs.is_some_and(|l| runs >= l) {
            drop(all);
            return Err(self.runs_refusal(tenant, &q, runs));
        }
        let waiting = local.waiting.len() as u64;
        if q.parked_runs.is_some_and(|l| waiting >= l) {
            drop(all);
            return Err(self.waiting_refusal(tenant, &q, waiting));
        }
        let used = local.tokens_used(minute);
        if q.model_tokens_per_hour.is_some_and(|l| used >= l) {
            drop(all);
            return Err(self.tokens_refusal(tenant, &q, used));
        }
        local.runs.insert(run_id.to_owned());
        drop(all);
        self.metrics.runs.get_or_create(&tenant_label(tenant)).inc();
        Ok(())
    }

    fn runs_refusal(&self, tenant: &str, q: &RunQuota, n: u64) -> Error {
        let l = q.concurrent_runs.unwrap_or_default();
        self.refused(
            tenant,
            "concurrent_runs",
            l,
            format!("{n} runs not ended; wait for one to end or cancel one"),
        )
    }

    fn waiting_refusal(&self, tenant: &str, q: &RunQuota, n: u64) -> Error {
        let l = q.parked_runs.unwrap_or_default();
        self.refused(
            tenant,
            "parked_runs",
            l,
            format!("{n} runs wait for a person; answer or cancel them first"),
        )
    }

    fn tokens_refusal(&self, tenant: &str, q: &RunQuota, n: u64) -> Error {
        let l = q.model_tokens_per_hour.unwrap_or_default();
        self.refused(
            tenant,
            "model_tokens_per_hour",
            l,
            format!("{n} model tokens used in the last hour"),
        )
    }

    /// A run of `tenant` runs here: counted in this replica's view (a new
    /// run once admitted, or one resumed here).
    pub fn started(&self, tenant: &str, run_id: &str) {
        if self.local(tenant, |l| l.runs.insert(run_id.to_owned())) {
            self.metrics.runs.get_or_create(&tenant_label(tenant)).inc();
        }
    }

    /// A run of `tenant` stops here: it `ended` (it no longer counts
    /// anywhere), or left this replica (parked, handed over: it still
    /// counts in Redis).
    pub async fn stopped(&self, tenant: &str, run_id: &str, ended: bool) {
        let (was_running, was_waiting) = self.local(tenant, |l| {
            (l.runs.remove(run_id), l.waiting.remove(run_id).is_some())
        });
        if was_running {
            self.metrics.runs.get_or_create(&tenant_label(tenant)).dec();
        }
        if was_waiting {
            self.metrics
                .waiting
                .get_or_create(&tenant_label(tenant))
                .dec();
        }
        if ended
            && let Some(durable) = &self.durable
            && let Err(e) = durable.run_ended(tenant, run_id).await
        {
            // Its entries leave at the run's deadline.
            tracing::warn!(run_id, error = %e, "cannot release a run's quota");
        }
    }

    /// A run of `tenant` asks a person a question answerable until
    /// `deadline_ms`.
    pub async fn asking(&self, tenant: &str, run_id: &str, deadline_ms: i64) {
        let first = self.local(tenant, |l| {
            let n = l.waiting.entry(run_id.to_owned()).or_default();
            *n += 1;
            *n == 1
        });
        if first {
            self.metrics
                .waiting
                .get_or_create(&tenant_label(tenant))
                .inc();
        }
        if self.config.of(tenant).parked_runs.is_some()
            && let Some(durable) = &self.durable
            && let Err(e) = durable.set_waiting(tenant, run_id, Some(deadline_ms)).await
        {
            tracing::warn!(run_id, error = %e, "cannot count a run waiting for a person");
        }
    }

    /// A question of a run of `tenant` was answered or closed.
    pub async fn answered(&self, tenant: &str, run_id: &str) {
        let last = self.local(tenant, |l| match l.waiting.get_mut(run_id) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                l.waiting.remove(run_id);
                true
            }
            None => false,
        });
        if !last {
            return;
        }
        self.metrics
            .waiting
            .get_or_create(&tenant_label(tenant))
            .dec();
        if self.config.of(tenant).parked_runs.is_some()
            && let Some(durable) = &self.durable
            && let Err(e) = durable.set_waiting(tenant, run_id, None).await
        {
            tracing::warn!(run_id, error = %e, "cannot count a run no longer waiting");
        }
    }

    /// Whether `tenant` may ask a model now: `RESOURCE_EXHAUSTED` (the
    /// message names the quota) when it used its tokens of the last hour.
    pub async fn may_call_model(&self, tenant: &str) -> Result<(), Error> {
        let q = self.config.of(tenant);
        let Some(l) = q.model_tokens_per_hour else {
            return Ok(());
        };
        let used = match &self.durable {
            // Boxed: its future is not kept in every model turn's state in
            // memory mode, where it never runs.
            Some(durable) => Box::pin(durable.tokens(tenant, 0)).await?,
            None => self.local(tenant, |local| local.tokens_used(now_ms() / 60_000)),
        };
        if used >= l {
            return Err(self.tokens_refusal(tenant, &q, used));
        }
        Ok(())
    }

    /// `tenant`'s runs used `tokens` model tokens.
    pub async fn spend_tokens(&self, tenant: &str, tokens: u64) {
        if tokens == 0 {
            return;
        }
        self.metrics
            .tokens
            .get_or_create(&tenant_label(tenant))
            .inc_by(tokens);
        let minute = now_ms() / 60_000;
        self.local(tenant, |l| {
            l.tokens_used(minute);
            match l.tokens.back_mut() {
                Some((m, n)) if *m == minute => *n += tokens,
                _ => l.tokens.push_back((minute, tokens)),
            }
        });
        if self.config.of(tenant).model_tokens_per_hour.is_some()
            && let Some(durable) = &self.durable
            && let Err(e) = Box::pin(durable.tokens(tenant, tokens)).await
        {
            tracing::warn!(tenant, error = %e, "cannot count model tokens");
        }
    }
}

/// Billionths per input and output token of `price`.
fn per_token(price: Option<&Price>) -> Option<(f64, f64)> {
    price.map(|p| {
        (
            p.cost_nanos(1_000_000, 0, 0) as f64 / 1e6,
            p.cost_nanos(0, 0, 1_000_000) as f64 / 1e6,
        )
    })
}

impl RunQuotas {
    /// `tenant`'s model budgets per period (none: its calls hold nothing).
    pub fn periods_of(&self, tenant: &str) -> Vec<PeriodBudget> {
        self.config.of(tenant).periods()
    }

    /// This replica's calls hold `by` more tokens of `tenant`'s budgets.
    fn held(&self, tenant: &str, by: i64) {
        self.metrics
            .held
            .get_or_create(&tenant_label(tenant))
            .inc_by(by);
    }

    fn fail_open(&self, tenant: &str) -> bool {
        self.config
            .of(tenant)
            .model_budgets_fail_open
            .unwrap_or(false)
    }
}

#[async_trait::async_trait]
impl Periods for RunQuotas {
    async fn reserve(
        &self,
        tenant: &str,
        input: u64,
        cap: Option<u32>,
        price: Option<&Price>,
        deadline: std::time::Instant,
    ) -> Result<(PeriodHold, Option<u32>), PeriodRefusal> {
        let budgets = self.periods_of(tenant);
        if budgets.is_empty() {
            return Ok((PeriodHold::default(), cap));
        }
        let ask = crate::model::call::period::Ask {
            input,
            cap,
            price: per_token(price),
        };
        let held = match &self.durable {
            None => self.periods.reserve(tenant, &budgets, ask, deadline).await,
            Some(durable) => match durable
                .reserve_periods(tenant, &budgets, ask, deadline)
                .await
            {
                Err(PeriodRefusal::Unreachable(_)) if self.fail_open(tenant) => {
                    Ok((PeriodHold::default(), cap))
                }
                other => other,
            },
        };
        if let Ok((hold, _)) = &held {
            self.held(tenant, hold.tokens as i64);
        }
        held
    }

    fn release(&self, hold: PeriodHold, tokens: u64, cost: u64) {
        if hold.keys.is_empty() {
            return;
        }
        self.held(&hold.tenant, -(hold.tokens as i64));
        match &self.durable {
            None => self.periods.settle(&hold, tokens, cost),
            Some(durable) => {
                // Not renewed from now on, whatever becomes of the settle.
                durable.live_holds().remove(&hold.holds, &hold.id);
                // Off the call's path, so no drop cuts it short (should
                // it fail, the hold lapses by itself).
                let durable = durable.clone();
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    handle.spawn(async move { durable.settle_periods(&hold, tokens, cost).await });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Money, RunQuota};

    /// Quotas whose shared counters are a Redis nobody serves.
    fn unreachable(fail_open: bool) -> RunQuotas {
        let redis = baton_store::redis::RedisConfig {
            url: "redis://127.0.0.1:1".into(),
            timeout: Duration::from_millis(200),
            ..Default::default()
        };
        let durable =
            SharedState::open(&redis, "r", Duration::from_secs(60)).expect("a lazy connection");
        let config = QuotaConfig {
            default: RunQuota {
                model_cost_per_day: Some(Money(1_000_000_000)),
                model_budgets_fail_open: Some(fail_open),
                ..Default::default()
            },
            ..Default::default()
        };
        RunQuotas::new(config, Some(durable), QuotaMetrics::default())
    }

    #[tokio::test]
    async fn period_budgets_fail_closed_when_redis_does_not_answer_unless_told_to_fail_open() {
        let price = crate::catalog::prices::Prices::new(
            &[(
                "m:x".to_owned(),
                serde_norway::from_str("{input: 1.0, output: 2.0}").expect("price"),
            )]
            .into_iter()
            .collect(),
            None,
            std::path::Path::new("."),
        )
        .expect("prices");
        let p = price.of("m:x");
        let far = std::time::Instant::now() + Duration::from_secs(5);
        match unreachable(false)
            .reserve("acme", 10, Some(5), p, far)
            .await
        {
            Err(PeriodRefusal::Unreachable(m)) => {
                assert!(
                    m.starts_with("the tenant's model budgets cannot be read"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        // Failing open, the call goes ahead holding nothing.
        let (hold, cap) = unreachable(true)
            .reserve("acme", 10, Some(5), p, far)
            .await
            .expect("fail open");
        assert_eq!((hold.keys.len(), cap), (0, Some(5)));
    }
}
