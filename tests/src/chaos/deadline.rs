//! Answers near the deadline. Now and then a run that asks a question
//! (billing, the support group, `slow_payer`, the interviewer) is started
//! *tight*: with a short `limits.approval_timeout` ([`TIGHT`]), and its
//! client answers within about a second of the question's deadline — most
//! often just before it, sometimes just after — on a replica of its
//! choice, as a person who hesitated would.
//!
//! What the run store accepts before the deadline decides: an answer told
//! OK is the one the run takes, and an answer refused (its deadline
//! passed, or the question was closed) leaves the question to its
//! deadline. Rule `answer-deadline` (in [`super::answers`]): a question
//! closed by its deadline although an answer to it was told OK. A tight
//! run's question closed by its deadline is otherwise right; on any other
//! run it is an `answer` violation (nobody hesitates there, and the
//! replicas' deadline is far).

use std::time::{Duration, SystemTime};

use baton_client::pb::{self, run_event::Payload};

use super::{history::Expected, items::Item, rng::Rng};

/// The `limits.approval_timeout` of a tight run.
pub const TIGHT: Duration = Duration::from_secs(3);

/// The share of the runs that ask which are started tight.
const CHANCE: f64 = 0.25;

/// The client answers a tight run's question at the deadline minus a
/// margin drawn uniformly between `-AFTER` and `BEFORE`.
const BEFORE: Duration = Duration::from_millis(900);
const AFTER: Duration = Duration::from_millis(300);

/// Whether to start a run of `item` tight.
pub fn tight(rng: &mut Rng, item: Item) -> bool {
    matches!(
        item,
        Item::Billing | Item::Support | Item::SlowPayer | Item::Interviewer
    ) && rng.chance(CHANCE)
}

/// What a run of `item` on `input` must end with. A tight interviewer may
/// be answered (the city chosen) or closed by its deadline (it decides
/// without): its output names a trip either way, and [`super::answers`]
/// judges which.
pub fn expected(item: Item, input: &str, tight: bool) -> Expected {
    if tight && item == Item::Interviewer {
        Expected::Prefix("Planning a trip to ".into())
    } else {
        item.expected(input)
    }
}

/// Milliseconds left before `deadline` (negative once it passed). The
/// replicas run on this machine: one clock.
pub fn margin_ms(deadline: SystemTime) -> i64 {
    match deadline.duration_since(SystemTime::now()) {
        Ok(left) => left.as_millis() as i64,
        Err(past) => -(past.duration().as_millis() as i64),
    }
}

/// Sleeps until the moment the client answers a tight run's question
/// whose deadline is `deadline`.
pub async fn wait_near(deadline: SystemTime, rng: &mut Rng) {
    let shift = rng.between(Duration::ZERO, BEFORE + AFTER);
    let at = if shift < BEFORE {
        deadline.checked_sub(BEFORE - shift)
    } else {
        deadline.checked_add(shift - BEFORE)
    };
    if let Some(wait) = at.and_then(|at| at.duration_since(SystemTime::now()).ok()) {
        tokio::time::sleep(wait).await;
    }
}

/// The questions of `log` closed by their deadline.
pub fn closed(log: &[pb::RunEvent]) -> usize {
    log.iter()
        .filter(|e| match &e.payload {
            Some(Payload::ApprovalResolved(r)) => r.source() == pb::ApprovalSource::Deadline,
            Some(Payload::InputTimedOut(_)) => true,
            _ => false,
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_counts_down_through_the_deadline() {
        let left = margin_ms(SystemTime::now() + Duration::from_secs(2));
        assert!((1_900..=2_000).contains(&left), "{left}");
        assert!(margin_ms(SystemTime::now() - Duration::from_secs(1)) <= -1_000);
    }
}
