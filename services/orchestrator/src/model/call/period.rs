//! A tenant's model budgets per period, as numbers (a leaf of
//! `model::call`): the calendar periods in UTC, the counters of one, whether
//! a call fits them, and why not. Counted in this process
//! (`run::periods`) or in Redis (`shared_state::periods`), by the same
//! rules.

use super::budget::money;
use crate::config::quota::{Period, PeriodBudget};

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

/// Why a call does not fit a tenant's period budgets now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    /// It would fit (or fit better) once calls in flight settle: wait.
    Held,
    /// The budget at this index has too little left.
    Budget(usize),
}

/// Whether a call fits `budgets` whose counters are `counters`: the output
/// tokens it may write, and what it holds; or why not. `patient`: a call
/// that calls in flight keep from its whole `cap` is told to wait
/// ([`Short::Held`]) instead of taking less.
pub fn fit(
    budgets: &[PeriodBudget],
    counters: &[Counters],
    ask: Ask,
    patient: bool,
) -> Result<(Option<u32>, u64, u64), Short> {
    let want = ask.cap.map_or(u64::MAX, u64::from);
    let (mut cap, mut free) = (want, want);
    let mut refusing = None;
    let (pin, pout) = ask.price.unwrap_or((0.0, 0.0));
    let input_cost = ask.input as f64 * pin;
    for (i, (b, c)) in budgets.iter().zip(counters).enumerate() {
        if let Some(limit) = b.tokens {
            let room = limit.saturating_sub(c.tokens);
            if room <= ask.input {
                return Err(Short::Budget(i));
            }
            free = free.min(room - ask.input);
            let left = room.saturating_sub(c.held_tokens);
            if left <= ask.input {
                refusing.get_or_insert(i);
                cap = 0;
            } else {
                cap = cap.min(left - ask.input);
            }
        }
        if let Some(limit) = b.cost_nanos {
            if ask.price.is_none() {
                return Err(Short::Budget(i));
            }
            let room = limit.saturating_sub(c.cost) as f64;
            if room < input_cost + pout.max(1.0) {
                return Err(Short::Budget(i));
            }
            let left = room - c.held_cost as f64;
            if pout > 0.0 {
                free = free.min(((room - input_cost) / pout).floor() as u64);
            }
            if left < input_cost + pout.max(1.0) {
                refusing.get_or_insert(i);
                cap = 0;
            } else if pout > 0.0 {
                cap = cap.min(((left - input_cost) / pout).floor() as u64);
            }
        }
    }
    if cap < free && patient {
        return Err(Short::Held);
    }
    if let Some(i) = refusing {
        return Err(Short::Budget(i));
    }
    let bounded = cap != u64::MAX;
    let out = if bounded { cap } else { 0 };
    let held_cost = (input_cost + out as f64 * pout).round() as u64;
    Ok((
        bounded.then(|| cap.min(u64::from(u32::MAX)) as u32),
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

/// Who a tenant is in a message: `tenant acme`, or `the default tenant`
/// (the tenant of calls without a key).
fn who(tenant: &str) -> String {
    if tenant.is_empty() {
        "the default tenant".to_owned()
    } else {
        format!("tenant {tenant}")
    }
}

/// Why `budget` (with `counters`) refused a call asking `ask`.
pub fn refusal(tenant: &str, b: &PeriodBudget, c: &Counters, ask: Ask) -> String {
    let tenant = who(tenant);
    let tokens_refuse = b
        .tokens
        .is_some_and(|l| l.saturating_sub(c.tokens + c.held_tokens) <= ask.input);
    if tokens_refuse {
        let limit = b.tokens.unwrap_or(0);
        return format!(
            "quotas.{}: {tenant}: {} of {limit} tokens spent this UTC {}{}; the next model call needs at least {}",
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
            "quotas.{}: {tenant}: a model without a price cannot be bounded by cost (give it a price)",
            quota_name(b, true)
        );
    }
    format!(
        "quotas.{}: {tenant}: {} of {} spent this UTC {}{}",
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
        assert_eq!(
            fit(&budgets, &[spent], ask(99), false),
            Ok((Some(1), 100, 0))
        );
        assert_eq!(
            fit(&budgets, &[spent], ask(100), false),
            Err(Short::Budget(0))
        );
        // Patient, it waits for the 100 held.
        assert_eq!(fit(&budgets, &[spent], ask(100), true), Err(Short::Held));
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
        assert_eq!(
            fit(&cost, &[Counters::default()], unpriced, true),
            Err(Short::Budget(0))
        );
        let priced = Ask {
            price: Some((1000.0, 2000.0)),
            ..unpriced
        };
        // (10 000 000 - 10 000) / 2 000 = 4 995 output tokens.
        assert_eq!(
            fit(&cost, &[Counters::default()], priced, true),
            Ok((Some(4995), 5005, 10_000_000))
        );
    }
}
