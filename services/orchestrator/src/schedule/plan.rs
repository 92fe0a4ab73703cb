//! What a claimed schedule does next ([`plan`]), decided from its timing,
//! its state and the time, with nothing else: fire a tick, record ticks
//! not fired (skipped, queued, missed), or wait.

use baton_proto::v1::{ScheduleMissed, ScheduleOverlap, ScheduleTickOutcome as Outcome};

use super::{
    spec::Spec,
    store::{State, Tick},
};

/// Most ticks counted one by one when a schedule is behind (the rest are
/// counted by the last one's time).
const MOST_COUNTED: usize = 10_000;

/// What a claimed schedule does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Fire `tick` (the queued one, `queued`), after `missed` ticks
    /// missed.
    Fire {
        /// The tick fired.
        tick_ms: i64,
        /// It was the queued tick.
        queued: bool,
        /// Ticks missed before it.
        missed: u32,
    },
    /// Record these ticks (newest last) without a run; `last_ms` is the
    /// last tick handled, `queued_ms` the tick waiting.
    Record {
        /// The ticks, oldest first.
        ticks: Vec<Tick>,
        /// The last tick handled.
        last_ms: i64,
        /// The tick waiting for the previous run.
        queued_ms: Option<i64>,
    },
    /// Nothing due: next due at `due_ms` (none: the schedule has ended).
    Wait {
        /// When it is next due.
        due_ms: Option<i64>,
    },
}

fn tick(tick_ms: i64, now: i64, outcome: Outcome, run_id: &str, missed: u32) -> Tick {
    Tick {
        tick_ms,
        handled_ms: now,
        outcome: outcome as i32,
        run_id: run_id.to_owned(),
        missed,
        message: String::new(),
    }
}

/// The next step of a schedule whose ticks after `base_ms` are to be
/// handled, at `now`; a tick older than `late_ms` is missed;
/// `previous_running`: its latest run still runs.
pub fn plan(
    spec: &Spec,
    state: &State,
    base_ms: i64,
    now: i64,
    late_ms: i64,
    previous_running: bool,
) -> Step {
    let previous = state.run_id.as_str();
    // Ticks due, in order (counted up to a bound).
    let mut due = Vec::new();
    let mut t = base_ms;
    while due.len() < MOST_COUNTED {
        match spec.next_after(t) {
            Some(next) if next <= now => {
                due.push(next);
                t = next;
            }
            _ => break,
        }
    }
    if let Some(queued) = state.queued_ms {
        if !previous_running {
            return Step::Fire {
                tick_ms: queued,
                queued: true,
                missed: 0,
            };
        }
        // Still waiting: ticks meanwhile are skipped.
        let last_ms = *due.last().unwrap_or(&base_ms);
        return Step::Record {
            ticks: due
                .iter()
                .map(|&t| tick(t, now, Outcome::Skipped, previous, 0))
                .collect(),
            last_ms,
            queued_ms: Some(queued),
        };
    }
    let Some(&first) = due.first() else {
        return Step::Wait {
            due_ms: spec.next_after(base_ms),
        };
    };
    let cutoff = now - late_ms;
    if first < cutoff {
        // Behind: every tick before the cutoff is missed.
        let last_late = spec.last_at_or_before(cutoff - 1, base_ms).unwrap_or(first);
        let counted = due.iter().filter(|&&t| t <= last_late).count();
        let missed = match &spec.when {
            // Past the bound: an interval's are counted by time; a cron's
            // stay at the bound (at least that many).
            crate::schedule::spec::When::Every { every_ms, .. } if counted == MOST_COUNTED => {
                u32::try_from((last_late - first) / every_ms + 1).unwrap_or(u32::MAX)
            }
            _ => counted as u32,
        };
        let on_time_follows = spec.next_after(last_late).is_some_and(|n| n <= now);
        return match spec.missed {
            ScheduleMissed::RunOnce if !on_time_follows => Step::Fire {
                tick_ms: last_late,
                queued: false,
                missed: missed.saturating_sub(1),
            },
            _ => Step::Record {
                ticks: vec![tick(last_late, now, Outcome::Missed, "", missed)],
                last_ms: last_late,
                queued_ms: None,
            },
        };
    }
    if !previous_running {
        return Step::Fire {
            tick_ms: first,
            queued: false,
            missed: 0,
        };
    }
    match spec.overlap {
        ScheduleOverlap::Allow => Step::Fire {
            tick_ms: first,
            queued: false,
            missed: 0,
        },
        ScheduleOverlap::QueueOne => Step::Record {
            ticks: vec![tick(first, now, Outcome::Queued, previous, 0)],
            last_ms: first,
            queued_ms: Some(first),
        },
        _ => Step::Record {
            ticks: vec![tick(first, now, Outcome::Skipped, previous, 0)],
            last_ms: first,
            queued_ms: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::v1::ScheduleOverlap;

    use super::*;
    use crate::schedule::spec::When;

    fn every(s: i64, overlap: ScheduleOverlap, missed: ScheduleMissed) -> Spec {
        Spec {
            when: When::Every {
                every_ms: s * 1000,
                anchor_ms: 0,
            },
            end_ms: None,
            overlap,
            missed,
        }
    }

    fn state(last: i64) -> State {
        State {
            last_ms: last,
            run_id: "r0".into(),
            ..State::default()
        }
    }

    const LATE: i64 = 60_000;

    #[test]
    fn a_tick_due_fires_unless_the_previous_run_overlaps() {
        let skip = every(10, ScheduleOverlap::Skip, ScheduleMissed::Skip);
        assert_eq!(
            plan(&skip, &state(0), 0, 10_500, LATE, false),
            Step::Fire {
                tick_ms: 10_000,
                queued: false,
                missed: 0
            }
        );
        assert_eq!(
            plan(&skip, &state(0), 0, 9_999, LATE, false),
            Step::Wait {
                due_ms: Some(10_000)
            }
        );
        let Step::Record {
            ticks,
            last_ms,
            queued_ms,
        } = plan(&skip, &state(0), 0, 10_500, LATE, true)
        else {
            panic!("skipped")
        };
        assert_eq!(
            (
                ticks[0].outcome,
                ticks[0].run_id.as_str(),
                last_ms,
                queued_ms
            ),
            (Outcome::Skipped as i32, "r0", 10_000, None)
        );
        let allow = every(10, ScheduleOverlap::Allow, ScheduleMissed::Skip);
        assert!(matches!(
            plan(&allow, &state(0), 0, 10_500, LATE, true),
            Step::Fire {
                tick_ms: 10_000,
                ..
            }
        ));
    }

    #[test]
    fn queue_one_waits_for_the_previous_run_and_skips_the_rest() {
        let queue = every(10, ScheduleOverlap::QueueOne, ScheduleMissed::Skip);
        let Step::Record {
            queued_ms, last_ms, ..
        } = plan(&queue, &state(0), 0, 10_500, LATE, true)
        else {
            panic!("queued")
        };
        assert_eq!((queued_ms, last_ms), (Some(10_000), 10_000));
        let mut s = state(10_000);
        s.queued_ms = Some(10_000);
        // Still running at the next tick: that one is skipped, one stays queued.
        let Step::Record {
            ticks, queued_ms, ..
        } = plan(&queue, &s, 10_000, 20_100, LATE, true)
        else {
            panic!("skipped")
        };
        assert_eq!(
            (ticks.len(), ticks[0].outcome, queued_ms),
            (1, Outcome::Skipped as i32, Some(10_000))
        );
        // Ended: the queued tick fires.
        assert_eq!(
            plan(&queue, &s, 10_000, 12_000, LATE, false),
            Step::Fire {
                tick_ms: 10_000,
                queued: true,
                missed: 0
            }
        );
    }

    #[test]
    fn after_downtime_missed_ticks_are_skipped_or_run_once() {
        let skip = every(10, ScheduleOverlap::Skip, ScheduleMissed::Skip);
        // Down from 0 to 300 s: ticks 10…240 are older than a minute.
        let Step::Record { ticks, last_ms, .. } = plan(&skip, &state(0), 0, 300_000, LATE, false)
        else {
            panic!("missed")
        };
        assert_eq!(
            (ticks[0].outcome, ticks[0].missed, last_ms),
            (Outcome::Missed as i32, 23, 230_000)
        );
        // Then the on-time ones fire, one by one.
        assert!(matches!(
            plan(&skip, &state(230_000), 230_000, 300_000, LATE, false),
            Step::Fire {
                tick_ms: 240_000,
                ..
            }
        ));
        // run_once with nothing on time after: one run for the latest.
        let once = every(100, ScheduleOverlap::Skip, ScheduleMissed::RunOnce);
        assert_eq!(
            plan(&once, &state(0), 0, 390_000, LATE, false),
            Step::Fire {
                tick_ms: 300_000,
                queued: false,
                missed: 2
            }
        );
        // A day of a schedule every second: counted, not looped forever.
        let fast = every(1, ScheduleOverlap::Skip, ScheduleMissed::Skip);
        let Step::Record { last_ms, .. } = plan(&fast, &state(0), 0, 86_400_000, LATE, false)
        else {
            panic!("missed")
        };
        assert_eq!(last_ms, 86_400_000 - LATE - 1000);
    }
}
