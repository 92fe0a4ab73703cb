//! What a schedule store keeps and answers (see the module docs of
//! `schedule::store`).

use baton_proto::v1 as pb;
use serde::{Deserialize, Serialize};

/// Most recent ticks kept per schedule.
pub const RECENT: usize = 20;

/// A tick being fired: its time and the id chosen for its run before it
/// starts (so a replica that takes the schedule over starts the same run,
/// or finds it started).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The tick.
    pub tick_ms: i64,
    /// Its run's id.
    pub run_id: String,
    /// It was the queued tick.
    #[serde(default)]
    pub queued: bool,
    /// Ticks missed before it (a `run_once` after downtime).
    #[serde(default)]
    pub missed: u32,
}

/// One tick as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// When it was due.
    pub tick_ms: i64,
    /// When it was handled.
    pub handled_ms: i64,
    /// A `ScheduleTickOutcome`.
    pub outcome: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// The run it started or found running.
    pub run_id: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    /// Ticks missed (a MISSED record).
    pub missed: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    /// Why its run was refused.
    pub message: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where a schedule stands (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The last tick handled (fired, skipped, queued, missed); the
    /// schedule's creation before its first.
    pub last_ms: i64,
    /// The tick being fired, with its run's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    /// The tick waiting for the previous run (overlap QUEUE_ONE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<i64>,
    /// The latest run it started.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// Newest first.
    #[serde(default)]
    pub recent: Vec<Tick>,
}

impl State {
    /// Records `tick`, newest first, keeping [`RECENT`].
    pub fn record(&mut self, tick: Tick) {
        self.recent.insert(0, tick);
        self.recent.truncate(RECENT);
    }
}

/// A schedule as kept.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its id.
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its definition (`schedule_id`, `description`, the run, timing,
    /// policies, `created_at`, `from_agents_file`).
    pub def: pb::Schedule,
    /// Paused: nothing fires.
    pub paused: bool,
    /// When it was last resumed (its ticks before are not fired).
    pub resumed_ms: i64,
    /// Where it stands.
    pub state: State,
}

impl Stored {
    /// Ticks after this are the ones to handle.
    pub fn base_ms(&self) -> i64 {
        self.state.last_ms.max(self.resumed_ms)
    }
}

/// A claim of a due schedule: its id and the token its writes carry.
#[derive(Debug, Clone)]
pub struct Claim {
    /// The schedule.
    pub id: String,
    /// The due score the claim set.
    pub token: String,
}

/// What a claim found: the time (the store's clock), the schedules
/// claimed, and when the earliest one left is due.
#[derive(Debug, Clone, Default)]
pub struct Claimed {
    /// The store's time.
    pub now_ms: i64,
    /// The schedules claimed.
    pub claims: Vec<Claim>,
    /// When the earliest one left is due.
    pub next_due_ms: Option<i64>,
}
