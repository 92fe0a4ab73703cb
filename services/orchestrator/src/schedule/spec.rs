//! A schedule's definition checked ([`check`]) and read back ([`Spec`]):
//! when it ticks (a cron expression in a time zone, or an interval), until
//! when, and what it does on overlap and after downtime. Times are
//! milliseconds since the Unix epoch.

use std::{str::FromStr as _, time::Duration};

use baton_proto::v1 as pb;
use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// Most characters of a description.
pub const MAX_DESCRIPTION: usize = 256;

/// When a schedule ticks.
#[derive(Debug, Clone)]
pub enum When {
    /// At each match of a cron expression, read in a time zone.
    Cron {
        /// The expression.
        cron: Box<croner::Cron>,
        /// The time zone it is read in.
        tz: chrono_tz::Tz,
    },
    /// Every `every_ms`, from `anchor_ms` (its first tick one interval
    /// after).
    Every {
        /// The interval.
        every_ms: i64,
        /// Its start (the schedule's creation).
        anchor_ms: i64,
    },
}

/// A schedule's timing, read from its definition.
#[derive(Debug, Clone)]
pub struct Spec {
    /// When it ticks.
    pub when: When,
    /// No tick after this.
    pub end_ms: Option<i64>,
    /// What a tick does while the previous run runs.
    pub overlap: pb::ScheduleOverlap,
    /// What happens to ticks missed.
    pub missed: pb::ScheduleMissed,
}

/// A timestamp in milliseconds.
pub fn ms(t: &baton_proto::wkt::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(t.nanos) / 1_000_000)
}

/// Milliseconds as a timestamp.
pub fn timestamp(ms: i64) -> baton_proto::wkt::Timestamp {
    baton_proto::wkt::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// An optional duration field; a negative or malformed one is refused
/// naming `field`.
fn duration(
    field: &'static str,
    v: Option<baton_proto::wkt::Duration>,
) -> Result<Option<Duration>> {
    let Some(v) = v else { return Ok(None) };
    if v.seconds < 0 || v.nanos < 0 || v.nanos >= 1_000_000_000 {
        return Err(Error::invalid(field, "must be a duration of at least zero"));
    }
    Ok(Some(Duration::new(v.seconds as u64, v.nanos as u32)))
}

fn parse_cron(field: &'static str, text: &str) -> Result<croner::Cron> {
    croner::Cron::from_str(text)
        .map_err(|e| Error::invalid(field, format!("{text:?} is not a cron expression: {e}")))
}

fn parse_tz(field: &'static str, text: &str) -> Result<chrono_tz::Tz> {
    if text.is_empty() {
        return Ok(chrono_tz::UTC);
    }
    text.parse::<chrono_tz::Tz>().map_err(|_| {
        Error::invalid(
            field,
            format!("{text:?} is not an IANA time zone (such as \"Europe/Paris\" or \"UTC\")"),
        )
    })
}

/// Checks a CreateScheduleRequest's timing and policies, as of `now_ms`,
/// against the shortest interval allowed; its definition (without its
/// run, which the caller checks against the catalog) on success. Each
/// problem names its field.
pub fn check(r: &pb::CreateScheduleRequest, now_ms: i64, min_interval: Duration) -> Result<Spec> {
    if r.description.chars().count() > MAX_DESCRIPTION {
        return Err(Error::invalid(
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters"),
        ));
    }
    match (&r.agent, &r.pipeline) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "pipeline",
                "give either agent or pipeline, not both",
            ));
        }
        (None, None) => {
            return Err(Error::invalid(
                "agent",
                "give the run to start: agent (an agent or group) or pipeline",
            ));
        }
        _ => {}
    }
    let min_ms = min_interval.as_millis() as i64;
    let when = match (r.cron.trim(), &r.interval) {
        ("", None) => {
            return Err(Error::invalid(
                "cron",
                "give cron (with time_zone) or interval",
            ));
        }
        ("", Some(_)) => {
            if !r.time_zone.is_empty() {
                return Err(Error::invalid(
                    "time_zone",
                    "applies to cron only (an interval counts from the schedule's creation)",
                ));
            }
            let every = duration("interval", r.interval)?.unwrap_or_default();
            let every_ms = every.as_millis() as i64;
            if every_ms < min_ms {
                return Err(Error::invalid(
                    "interval",
                    format!(
                        "{} is below the server's schedules.min_interval ({})",
                        baton_common::config::duration::format(every),
                        baton_common::config::duration::format(min_interval)
                    ),
                ));
            }
            When::Every {
                every_ms,
                anchor_ms: now_ms,
            }
        }
        (_, Some(_)) => {
            return Err(Error::invalid(
                "interval",
                "give either cron or interval, not both",
            ));
        }
        (text, None) => {
            let cron = parse_cron("cron", text)?;
            let tz = parse_tz("time_zone", &r.time_zone)?;
            let when = When::Cron {
                cron: Box::new(cron),
                tz,
            };
            // The shortest gap between its next ticks (a cron with
            // seconds may tick more often than the interval allowed).
            let probe = Spec {
                when: when.clone(),
                end_ms: None,
                overlap: pb::ScheduleOverlap::Skip,
                missed: pb::ScheduleMissed::Skip,
            };
            let mut t = now_ms;
            let mut prev = None;
            for _ in 0..16 {
                let Some(next) = probe.next_after(t) else {
                    break;
                };
                if let Some(p) = prev
                    && next - p < min_ms
                {
                    return Err(Error::invalid(
                        "cron",
                        format!(
                            "{text:?} fires every {}, below the server's schedules.min_interval ({})",
                            baton_common::config::duration::format(Duration::from_millis(
                                (next - p) as u64
                            )),
                            baton_common::config::duration::format(min_interval)
                        ),
                    ));
                }
                prev = Some(next);
                t = next;
            }
            if prev.is_none() {
                return Err(Error::invalid("cron", format!("{text:?} never fires")));
            }
            when
        }
    };
    let end_ms = r.end_at.as_ref().map(ms);
    if let Some(end) = end_ms
        && end <= now_ms
    {
        return Err(Error::invalid("end_at", "is in the past"));
    }
    let overlap = pb::ScheduleOverlap::try_from(r.overlap).map_err(|_| {
        Error::invalid("overlap", format!("{} is not a ScheduleOverlap", r.overlap))
    })?;
    let missed = pb::ScheduleMissed::try_from(r.missed)
        .map_err(|_| Error::invalid("missed", format!("{} is not a ScheduleMissed", r.missed)))?;
    Ok(Spec {
        when,
        end_ms,
        overlap: match overlap {
            pb::ScheduleOverlap::Unspecified => pb::ScheduleOverlap::Skip,
            o => o,
        },
        missed: match missed {
            pb::ScheduleMissed::Unspecified => pb::ScheduleMissed::Skip,
            m => m,
        },
    })
}

impl Spec {
    /// The timing of a stored definition (checked when it was made).
    pub fn of(def: &pb::Schedule) -> Result<Self> {
        let when = if def.cron.is_empty() {
            let every = duration("interval", def.interval)?.unwrap_or_default();
            When::Every {
                every_ms: (every.as_millis() as i64).max(1),
                anchor_ms: def.created_at.as_ref().map(ms).unwrap_or_default(),
            }
        } else {
            When::Cron {
                cron: Box::new(parse_cron("cron", &def.cron)?),
                tz: parse_tz("time_zone", &def.time_zone)?,
            }
        };
        Ok(Self {
            when,
            end_ms: def.end_at.as_ref().map(ms),
            overlap: pb::ScheduleOverlap::try_from(def.overlap)
                .unwrap_or(pb::ScheduleOverlap::Skip),
            missed: pb::ScheduleMissed::try_from(def.missed).unwrap_or(pb::ScheduleMissed::Skip),
        })
    }

    /// The first tick strictly after `t`; `None` past the end.
    pub fn next_after(&self, t: i64) -> Option<i64> {
        let next = match &self.when {
            When::Every {
                every_ms,
                anchor_ms,
            } => {
                let k = if t < *anchor_ms {
                    1
                } else {
                    (t - anchor_ms) / every_ms + 1
                };
                anchor_ms.checked_add(k.checked_mul(*every_ms)?)?
            }
            When::Cron { cron, tz } => {
                let at = DateTime::<Utc>::from_timestamp_millis(t)?.with_timezone(tz);
                cron.find_next_occurrence(&at, false)
                    .ok()?
                    .timestamp_millis()
            }
        };
        match self.end_ms {
            Some(end) if next > end => None,
            _ => Some(next),
        }
    }

    /// The last tick at or before `t` and after `after`; `None` when there
    /// is none.
    pub fn last_at_or_before(&self, t: i64, after: i64) -> Option<i64> {
        let t = self.end_ms.map_or(t, |end| t.min(end));
        let last = match &self.when {
            When::Every {
                every_ms,
                anchor_ms,
            } => {
                if t < anchor_ms + every_ms {
                    return None;
                }
                anchor_ms + (t - anchor_ms) / every_ms * every_ms
            }
            When::Cron { cron, tz } => {
                let at = DateTime::<Utc>::from_timestamp_millis(t)?.with_timezone(tz);
                cron.find_previous_occurrence(&at, true)
                    .ok()?
                    .timestamp_millis()
            }
        };
        (last > after).then_some(last)
    }

    /// Up to `n` ticks after `t`.
    pub fn next_n(&self, t: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(n);
        let mut t = t;
        while out.len() < n {
            match self.next_after(t) {
                Some(next) => {
                    out.push(next);
                    t = next;
                }
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(cron: &str, tz: &str, interval: Option<u64>) -> pb::CreateScheduleRequest {
        pb::CreateScheduleRequest {
            agent: Some(pb::RunAgentRequest {
                agent: "a".into(),
                ..Default::default()
            }),
            cron: cron.into(),
            time_zone: tz.into(),
            interval: interval.map(|s| baton_proto::wkt::Duration {
                seconds: s as i64,
                nanos: 0,
            }),
            ..Default::default()
        }
    }

    fn field(r: Result<Spec>) -> String {
        match r {
            Err(e) => e.field().unwrap_or_default().to_owned(),
            Ok(_) => "ok".into(),
        }
    }

    const MIN: Duration = Duration::from_secs(60);
    // 2026-12-06T12:00:00Z
    const NOW: i64 = 1_796_558_400_000;

    #[test]
    fn bad_timing_names_its_field() {
        assert_eq!(field(check(&request("", "", None), NOW, MIN)), "cron");
        assert_eq!(
            field(check(&request("not cron", "", None), NOW, MIN)),
            "cron"
        );
        assert_eq!(
            field(check(&request("61 * * * *", "", None), NOW, MIN)),
            "cron"
        );
        assert_eq!(
            field(check(&request("0 9 * * *", "Mars/Olympus", None), NOW, MIN)),
            "time_zone"
        );
        assert_eq!(
            field(check(&request("0 9 * * *", "", Some(60)), NOW, MIN)),
            "interval"
        );
        assert_eq!(
            field(check(&request("", "", Some(59)), NOW, MIN)),
            "interval"
        );
        assert_eq!(field(check(&request("", "", Some(60)), NOW, MIN)), "ok");
        assert_eq!(
            field(check(&request("", "UTC", Some(60)), NOW, MIN)),
            "time_zone"
        );
        // A cron with seconds under the minimum, and at it.
        assert_eq!(
            field(check(&request("*/30 * * * * *", "", None), NOW, MIN)),
            "cron"
        );
        assert_eq!(
            field(check(&request("0 * * * * *", "", None), NOW, MIN)),
            "ok"
        );
        assert_eq!(
            field(check(
                &request("* * * * * *", "", None),
                NOW,
                Duration::from_secs(1)
            )),
            "ok"
        );
        let mut past = request("0 9 * * *", "Europe/Paris", None);
        past.end_at = Some(timestamp(NOW - 1));
        assert_eq!(field(check(&past, NOW, MIN)), "end_at");
        past.end_at = Some(timestamp(NOW + 1));
        assert_eq!(field(check(&past, NOW, MIN)), "ok");
        let mut both = request("0 9 * * *", "", None);
        both.pipeline = Some(Default::default());
        assert_eq!(field(check(&both, NOW, MIN)), "pipeline");
        let mut neither = request("0 9 * * *", "", None);
        neither.agent = None;
        assert_eq!(field(check(&neither, NOW, MIN)), "agent");
        let mut long = request("0 9 * * *", "", None);
        long.description = "x".repeat(MAX_DESCRIPTION);
        assert_eq!(field(check(&long, NOW, MIN)), "ok");
        long.description.push('x');
        assert_eq!(field(check(&long, NOW, MIN)), "description");
    }

    #[test]
    fn cron_ticks_in_its_time_zone() {
        let spec = check(&request("0 9 * * *", "Europe/Paris", None), NOW, MIN).expect("checks");
        // 09:00 in Paris in December is 08:00 UTC: the next is tomorrow's.
        let next = spec.next_after(NOW).expect("a tick");
        assert_eq!(next, NOW + 20 * 3600 * 1000);
        let spec =
            check(&request("0 9 * * *", "America/New_York", None), NOW, MIN).expect("checks");
        assert_eq!(spec.next_after(NOW).expect("a tick"), NOW + 2 * 3600 * 1000);
        assert_eq!(
            spec.last_at_or_before(NOW + 2 * 3600 * 1000, 0),
            Some(NOW + 2 * 3600 * 1000)
        );
        assert_eq!(spec.next_n(NOW, 3).len(), 3);
    }

    #[test]
    fn intervals_count_from_creation_and_stop_at_the_end() {
        let mut r = request("", "", Some(60));
        r.end_at = Some(timestamp(NOW + 150_000));
        let spec = check(&r, NOW, MIN).expect("checks");
        assert_eq!(spec.next_after(NOW), Some(NOW + 60_000));
        assert_eq!(spec.next_after(NOW + 60_000), Some(NOW + 120_000));
        assert_eq!(spec.next_after(NOW + 120_000), None);
        assert_eq!(spec.last_at_or_before(NOW + 59_999, NOW), None);
        assert_eq!(
            spec.last_at_or_before(NOW + 600_000, NOW),
            Some(NOW + 120_000)
        );
        assert_eq!(spec.next_n(NOW, 5), vec![NOW + 60_000, NOW + 120_000]);
    }
}
