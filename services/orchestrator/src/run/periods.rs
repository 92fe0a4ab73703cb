//! A tenant's model budgets per period (`quotas.*.model_tokens_per_day`,
//! `…_per_month`, `model_cost_per_hour`, `…_per_day`, `…_per_month`):
//! calendar periods in UTC, counted where every replica counts them (Redis
//! with durable runs, see `run::durable::periods`; this process else).
//!
//! Each period's counters are what calls spent and what calls in flight
//! hold. A call reserves its input and the most output tokens it may write
//! against every period budget of its tenant, its `max_tokens` capped at
//! what they have left, or is refused (`RESOURCE_EXHAUSTED`, naming the
//! quota); after it answered the hold is settled to what it spent. A
//! period's counters leave an hour after the period ends.

use std::{collections::HashMap, sync::Mutex};

use crate::config::quota::{Period, PeriodBudget};
use crate::model::call::budget::money;
use crate::model::call::request::{PeriodHold, PeriodRefusal};

use super::clock::now_ms;

/// One period's counters: spent and held, tokens and cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Tokens spent.
    pub tokens: u64,
    /// Cost spent.
    pub cost: u64,
    /// Tokens held by calls in flight.
    pub held_tokens: u64,
    /// Cost held by calls in flight.
    pub held_cost: u64,
}

/// The period of `at_ms` (Unix ms): its number, and when it ends.
pub fn bucket(period: Period, at_ms: i64) -> (i64, i64) {
    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;
    match period {
        Period::Hour => (at_ms / HOUR, (at_ms / HOUR + 1) * HOUR),
        Period::Day => (at_ms / DAY, (at_ms / DAY + 1) * DAY),
        Period::Month => {
            let (y, m) = year_month(at_ms / DAY);
            let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            (y * 12 + m - 1, days_from_civil(next.0, next.1) * DAY)
        }
    }
}

/// The (year, month) of a day since the Unix epoch (Howard Hinnant's
/// civil-from-days).
fn year_month(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m)
}

/// The day since the Unix epoch of the 1st of `month` of `year`.
fn days_from_civil(year: i64, month: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// What one call asks of the period budgets.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// Its input tokens, estimated.
    pub input: u64,
    /// The most output tokens it may write (`None`: unbounded).
    pub cap: Option<u32>,
    /// Billionths per input and per output token, when priced.
    pub price: Option<(f64, f64)>,
}

/// Whether a call fits `budgets` whose counters are `counters`: the output
/// tokens it may write, and what it holds; or the index of the first budget
/// that refuses it.
pub fn fit(
    budgets: &[PeriodBudget],
    counters: &[Counters],
    ask: Ask,
) -> Result<(Option<u32>, u64, u64), usize> {
    let mut cap = ask.cap.map(u64::from);
    let (pin, pout) = ask.price.unwrap_or((0.0, 0.0));
    for (i, (b, c)) in budgets.iter().zip(counters).enumerate() {
        if let Some(limit) = b.tokens {
            let used = c.tokens + c.held_tokens;
            let left = limit.saturating_sub(used);
            if left <= ask.input {
                return Err(i);
            }
            cap = Some(cap.map_or(left - ask.input, |k| k.min(left - ask.input)));
        }
        if let Some(limit) = b.cost_nanos {
            if ask.price.is_none() {
                return Err(i);
            }
            let left = limit.saturating_sub(c.cost + c.held_cost) as f64;
            let input_cost = ask.input as f64 * pin;
            if left < input_cost + pout.max(1.0) {
                return Err(i);
            }
            if pout > 0.0 {
                let room = ((left - input_cost) / pout).floor() as u64;
                cap = Some(cap.map_or(room, |k| k.min(room)));
            }
        }
    }
    let out = cap.unwrap_or(0);
    let held_cost = (ask.input as f64 * pin + out as f64 * pout).round() as u64;
    Ok((
        cap.map(|c| c.min(u64::from(u32::MAX)) as u32),
        ask.input + out,
        held_cost,
    ))
}

/// The quota a period budget is, for messages: `model_cost_per_day`.
fn quota_name(b: &PeriodBudget, cost: bool) -> String {
    format!(
        "model_{}_per_{}",
        if cost { "cost" } else { "tokens" },
        b.period.as_str()
    )
}

/// Why `budget` (with `counters`) refused a call asking `ask`.
pub fn refusal(tenant: &str, b: &PeriodBudget, c: &Counters, ask: Ask) -> String {
    let tokens_refuse = b
        .tokens
        .is_some_and(|l| l.saturating_sub(c.tokens + c.held_tokens) <= ask.input);
    if tokens_refuse {
        let limit = b.tokens.unwrap_or(0);
        return format!(
            "quotas.{}: tenant {tenant}: {} of {limit} tokens spent this UTC {}{}; the next model call needs at least {}",
            quota_name(b, false),
            c.tokens,
            b.period.as_str(),
            held(c.held_tokens, money_free),
            ask.input + 1
        );
    }
    let limit = b.cost_nanos.unwrap_or(0);
    if ask.price.is_none() {
        return format!(
            "quotas.{}: tenant {tenant}: a model without a price cannot be bounded by cost (give it a price)",
            quota_name(b, true)
        );
    }
    format!(
        "quotas.{}: tenant {tenant}: {} of {} spent this UTC {}{}",
        quota_name(b, true),
        money(c.cost),
        money(limit),
        b.period.as_str(),
        held(c.held_cost, money)
    )
}

fn money_free(n: u64) -> String {
    n.to_string()
}

fn held(n: u64, show: fn(u64) -> String) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({} more held by calls in flight)", show(n))
    }
}

/// By tenant and period: the period's number and its counters.
type ByTenant = HashMap<(String, &'static str), (i64, Counters)>;

/// A tenant's period counters in this process (memory mode).
#[derive(Default)]
pub struct LocalPeriods {
    counters: Mutex<ByTenant>,
}

impl LocalPeriods {
    /// Reserves `ask` against `tenant`'s `budgets`.
    pub fn reserve(
        &self,
        tenant: &str,
        budgets: &[PeriodBudget],
        ask: Ask,
    ) -> Result<(PeriodHold, Option<u32>), PeriodRefusal> {
        let now = now_ms();
        let mut all = self.counters.lock().unwrap_or_else(|p| p.into_inner());
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
        let (cap, tokens, cost) = fit(budgets, &counters, ask).map_err(|i| {
            PeriodRefusal::Exhausted(refusal(tenant, &budgets[i], &counters[i], ask))
        })?;
        for b in budgets {
            if let Some(e) = all.get_mut(&(tenant.to_owned(), b.period.as_str())) {
                e.1.held_tokens += tokens;
                e.1.held_cost += cost;
            }
        }
        Ok((PeriodHold { keys, tokens, cost }, cap))
    }

    /// Settles `hold` to what the call spent.
    pub fn settle(&self, hold: &PeriodHold, tokens: u64, cost: u64) {
        let mut all = self.counters.lock().unwrap_or_else(|p| p.into_inner());
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_utc_hours_days_and_calendar_months() {
        // 2026-11-29T07:15:00Z.
        let at = 1_795_936_500_000;
        let (_, end) = bucket(Period::Hour, at);
        assert_eq!(end, 1_795_939_200_000, "08:00");
        let (_, end) = bucket(Period::Day, at);
        assert_eq!(end, 1_795_996_800_000, "the 30th, 00:00");
        let (n, end) = bucket(Period::Month, at);
        assert_eq!(n, 2026 * 12 + 10);
        assert_eq!(end, 1_796_083_200_000, "December 1st");
        // A December rolls into January.
        let (n, end) = bucket(Period::Month, 1_796_083_200_000);
        assert_eq!(n, 2026 * 12 + 11);
        assert_eq!(end, 1_798_761_600_000, "2027-01-01");
    }

    #[test]
    fn a_call_fits_a_period_budget_at_its_limit_and_is_refused_one_token_over() {
        let budgets = [PeriodBudget {
            period: Period::Day,
            tokens: Some(1000),
            cost_nanos: None,
        }];
        let spent = Counters {
            tokens: 800,
            held_tokens: 100,
            ..Default::default()
        };
        let ask = |input| Ask {
            input,
            cap: Some(500),
            price: None,
        };
        // 99 in and 1 out fit the 100 left; the cap comes down to 1.
        assert_eq!(fit(&budgets, &[spent], ask(99)), Ok((Some(1), 100, 0)));
        assert_eq!(fit(&budgets, &[spent], ask(100)), Err(0));
        assert_eq!(
            refusal("acme", &budgets[0], &spent, ask(100)),
            "quotas.model_tokens_per_day: tenant acme: 800 of 1000 tokens spent this UTC day (100 more held by calls in flight); the next model call needs at least 101"
        );
        // A cost budget refuses an unpriced call and caps a priced one.
        let cost = [PeriodBudget {
            period: Period::Month,
            tokens: None,
            cost_nanos: Some(10_000_000),
        }];
        let unpriced = Ask {
            input: 10,
            cap: None,
            price: None,
        };
        assert_eq!(fit(&cost, &[Counters::default()], unpriced), Err(0));
        let priced = Ask {
            price: Some((1000.0, 2000.0)),
            ..unpriced
        };
        // (10 000 000 - 10 000) / 2 000 = 4 995 output tokens.
        assert_eq!(
            fit(&cost, &[Counters::default()], priced),
            Ok((Some(4995), 5005, 10_000_000))
        );
    }

    #[test]
    fn local_counters_hold_then_settle() {
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
        let (first, cap) = local.reserve("t", &budgets, ask).expect("first");
        assert_eq!((cap, first.tokens), (Some(100), 200));
        // 100 left above the first's hold: not enough for 100 in and 1 out.
        assert!(local.reserve("t", &budgets, ask).is_err());
        local.settle(&first, 120, 0);
        // 180 left: 100 in, and 80 out at most.
        let (_, cap) = local.reserve("t", &budgets, ask).expect("after the settle");
        assert_eq!(cap, Some(80));
    }
}
