//! Where schedules are kept: in the process ([`memory`]) or in Redis
//! ([`redis`]), each the same operations.
//!
//! A schedule is its definition (a `baton.v1.Schedule` without its
//! derived fields), its tenant, whether it is paused and since when it was
//! resumed, and its [`State`]: the last tick handled, the tick being
//! fired with the id of its run (`pending`), the tick waiting for the
//! previous run (`queued`), the latest run and the recent ticks.
//!
//! Schedules due are in a due set scored by when each is due. A replica
//! **claims** the ones due (atomically: each is re-scored to the end of a
//! lease, and that score is the claim's token), and only a holder whose
//! token is still the score may write a schedule's state
//! ([`Store::write`]): a replica whose lease lapsed, or whose schedule was
//! paused, resumed or deleted meanwhile, changes nothing. The write sets
//! the next due time, or takes the schedule out of the set (ended,
//! paused).

pub mod memory;
pub mod redis;

use std::sync::Arc;

use baton_proto::v1 as pb;
use serde::{Deserialize, Serialize};

use crate::error::Result;

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

/// A schedule store.
pub enum Store {
    /// In the process.
    Memory(memory::MemorySchedules),
    /// In Redis.
    Redis(redis::RedisSchedules),
}

impl Store {
    /// In memory, or in the Redis of `shared`.
    pub fn new(shared: Option<Arc<crate::shared_state::SharedState>>) -> Self {
        match shared {
            Some(shared) => Store::Redis(redis::RedisSchedules::new(shared)),
            None => Store::Memory(memory::MemorySchedules::default()),
        }
    }

    /// Adds a schedule, due at `due_ms` (none: paused or ended). An
    /// agents-file schedule (`replace`) replaces its definition and keeps
    /// its state when it exists; `false` when a tenant already has `most`
    /// schedules (not counting the agents file's).
    pub async fn put(
        &self,
        s: &Stored,
        due_ms: Option<i64>,
        replace: bool,
        most: usize,
    ) -> Result<bool> {
        match self {
            Store::Memory(m) => Ok(m.put(s, due_ms, replace, most)),
            Store::Redis(r) => r.put(s, due_ms, replace, most).await,
        }
    }

    /// A schedule.
    pub async fn get(&self, id: &str) -> Result<Option<Stored>> {
        match self {
            Store::Memory(m) => Ok(m.get(id)),
            Store::Redis(r) => r.get(id).await,
        }
    }

    /// A tenant's schedules, oldest first.
    pub async fn list(&self, tenant: &str) -> Result<Vec<Stored>> {
        match self {
            Store::Memory(m) => Ok(m.list(tenant)),
            Store::Redis(r) => r.list(tenant).await,
        }
    }

    /// The ids of every schedule the agents file declared (`file:…`).
    pub async fn declared(&self) -> Result<Vec<(String, String)>> {
        match self {
            Store::Memory(m) => Ok(m.declared()),
            Store::Redis(r) => r.declared().await,
        }
    }

    /// Deletes a schedule; `false` when there was none.
    pub async fn delete(&self, tenant: &str, id: &str) -> Result<bool> {
        match self {
            Store::Memory(m) => Ok(m.delete(tenant, id)),
            Store::Redis(r) => r.delete(tenant, id).await,
        }
    }

    /// Pauses (`due_ms` none) or resumes (due then, resumed now) a
    /// schedule; `false` when there is none.
    pub async fn set_paused(
        &self,
        id: &str,
        paused: bool,
        now_ms: i64,
        due_ms: Option<i64>,
    ) -> Result<bool> {
        match self {
            Store::Memory(m) => Ok(m.set_paused(id, paused, now_ms, due_ms)),
            Store::Redis(r) => r.set_paused(id, paused, now_ms, due_ms).await,
        }
    }

    /// Claims up to `most` schedules due, each for `lease_ms`.
    pub async fn claim(&self, most: usize, lease_ms: i64) -> Result<Claimed> {
        match self {
            Store::Memory(m) => Ok(m.claim(most, lease_ms)),
            Store::Redis(r) => r.claim(most, lease_ms).await,
        }
    }

    /// Writes a claimed schedule's state and when it is next due (none:
    /// out of the due set), if the claim still holds; whether it did.
    pub async fn write(&self, claim: &Claim, state: &State, due_ms: Option<i64>) -> Result<bool> {
        match self {
            Store::Memory(m) => Ok(m.write(claim, state, due_ms)),
            Store::Redis(r) => r.write(claim, state, due_ms).await,
        }
    }

    /// Lets a claimed schedule go, due again at `due_ms`, without changing
    /// its state (if the claim still holds).
    pub async fn release(&self, claim: &Claim, due_ms: i64) -> Result<()> {
        match self {
            Store::Memory(m) => {
                m.release(claim, due_ms);
                Ok(())
            }
            Store::Redis(r) => r.release(claim, due_ms).await,
        }
    }
}
