//! The `schedules` section of the config: how often a replica looks for
//! ticks due, the shortest interval a schedule may have, and when a late
//! tick counts as missed (see `crate::schedule`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `schedules` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScheduleConfig {
    /// The shortest interval a schedule may have, and the shortest time
    /// between two ticks of a cron expression with seconds.
    #[serde(with = "baton_common::config::duration")]
    pub min_interval: Duration,
    /// A tick handled later than this after its time counts as missed
    /// (its schedule's `missed` policy says what happens to it).
    #[serde(with = "baton_common::config::duration")]
    pub late_after: Duration,
    /// How often a replica looks for ticks due when it knows of none
    /// sooner (it is woken at once for a schedule made or resumed on it).
    #[serde(with = "baton_common::config::duration")]
    pub poll: Duration,
    /// How long a replica holds a schedule while it fires a tick: another
    /// replica takes the schedule over when this passes unrenewed.
    #[serde(with = "baton_common::config::duration")]
    pub lease: Duration,
    /// Most schedules a tenant may have (besides the agents file's).
    pub max_per_tenant: usize,
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        Self {
            min_interval: Duration::from_secs(60),
            late_after: Duration::from_secs(60),
            poll: Duration::from_secs(1),
            lease: Duration::from_secs(15),
            max_per_tenant: 100,
        }
    }
}

/// Why the `schedules` section is refused.
#[derive(Debug, thiserror::Error)]
#[error("schedules.{field} {message}")]
pub struct ScheduleConfigError {
    field: &'static str,
    message: &'static str,
}

impl ScheduleConfig {
    /// Checks the section; the first problem names its field.
    pub fn validate(&self) -> Result<(), ScheduleConfigError> {
        let bad = |field, message| Err(ScheduleConfigError { field, message });
        if self.min_interval < Duration::from_secs(1) {
            return bad("min_interval", "must be at least 1s");
        }
        if self.late_after < Duration::from_secs(1) {
            return bad("late_after", "must be at least 1s");
        }
        if self.poll.is_zero() || self.poll > Duration::from_secs(60) {
            return bad("poll", "must be more than 0s and at most 60s");
        }
        if self.lease < Duration::from_secs(2) || self.lease > Duration::from_secs(600) {
            return bad("lease", "must be from 2s to 10m");
        }
        if self.max_per_tenant == 0 {
            return bad("max_per_tenant", "must be at least 1");
        }
        Ok(())
    }
}
