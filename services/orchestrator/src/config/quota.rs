//! One tenant's quotas (`quotas.default`, `quotas.tenants.<name>`): runs,
//! runs waiting for people, and what its runs may spend on models per
//! period.

use baton_common::quota::Limits;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of the prices' currency, kept in billionths (written as a
/// number, `25.0`; more than 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Money(pub u64);

impl Serialize for Money {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0 as f64 / 1e9)
    }
}

impl<'de> Deserialize<'de> for Money {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v.is_finite() && v > 0.0) {
            return Err(serde::de::Error::custom(format!(
                "{v} is not a positive amount of the prices' currency"
            )));
        }
        Ok(Self((v * 1e9).round().min(u64::MAX as f64) as u64))
    }
}

/// One tenant's limits (see `baton_common::quota`: unset is the default's,
/// or no limit).
///
/// The model budgets per hour, day and month are calendar periods in UTC
/// (the hour, the day from midnight, the month from the 1st), as providers
/// bill; `model_tokens_per_hour` (kept from before) is the sliding last
/// hour. Every model call reserves its worst case against each period
/// budget before it is sent and settles it after, as run budgets do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunQuota {
    /// Runs started and not ended (running, waiting or parked).
    pub concurrent_runs: Option<u64>,
    /// Runs waiting for a person (an approval or input open), parked or
    /// not: new runs are refused while this many wait.
    pub parked_runs: Option<u64>,
    /// Model tokens (input and output) in the last hour.
    pub model_tokens_per_hour: Option<u64>,
    /// Model tokens in the UTC day.
    pub model_tokens_per_day: Option<u64>,
    /// Model tokens in the UTC month.
    pub model_tokens_per_month: Option<u64>,
    /// Model cost (the prices' currency) in the UTC hour.
    pub model_cost_per_hour: Option<Money>,
    /// Model cost in the UTC day.
    pub model_cost_per_day: Option<Money>,
    /// Model cost in the UTC month.
    pub model_cost_per_month: Option<Money>,
    /// When the shared counters of the period budgets (Redis) do not
    /// answer, call the model anyway (default false: the call waits and
    /// tries again, then fails `UNAVAILABLE`).
    pub model_budgets_fail_open: Option<bool>,
}

/// A period of a tenant's model budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// The UTC hour.
    Hour,
    /// The UTC day.
    Day,
    /// The UTC month.
    Month,
}

impl Period {
    /// `hour`, `day`, `month`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hour => "hour",
            Self::Day => "day",
            Self::Month => "month",
        }
    }
}

/// One period budget of a tenant: its period and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeriodBudget {
    /// The period.
    pub period: Period,
    /// Most tokens in it.
    pub tokens: Option<u64>,
    /// Most cost in it, in billionths.
    pub cost_nanos: Option<u64>,
}

impl RunQuota {
    /// Its model budgets per period, those that bound anything.
    pub fn periods(&self) -> Vec<PeriodBudget> {
        [
            (Period::Hour, None, self.model_cost_per_hour),
            (
                Period::Day,
                self.model_tokens_per_day,
                self.model_cost_per_day,
            ),
            (
                Period::Month,
                self.model_tokens_per_month,
                self.model_cost_per_month,
            ),
        ]
        .into_iter()
        .filter(|(_, t, c)| t.is_some() || c.is_some())
        .map(|(period, tokens, cost)| PeriodBudget {
            period,
            tokens,
            cost_nanos: cost.map(|c| c.0),
        })
        .collect()
    }
}

impl Limits for RunQuota {
    fn over(&self, under: &Self) -> Self {
        Self {
            concurrent_runs: self.concurrent_runs.or(under.concurrent_runs),
            parked_runs: self.parked_runs.or(under.parked_runs),
            model_tokens_per_hour: self.model_tokens_per_hour.or(under.model_tokens_per_hour),
            model_tokens_per_day: self.model_tokens_per_day.or(under.model_tokens_per_day),
            model_tokens_per_month: self.model_tokens_per_month.or(under.model_tokens_per_month),
            model_cost_per_hour: self.model_cost_per_hour.or(under.model_cost_per_hour),
            model_cost_per_day: self.model_cost_per_day.or(under.model_cost_per_day),
            model_cost_per_month: self.model_cost_per_month.or(under.model_cost_per_month),
            model_budgets_fail_open: self
                .model_budgets_fail_open
                .or(under.model_budgets_fail_open),
        }
    }
}
