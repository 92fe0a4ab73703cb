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
mod record;
pub mod redis;

use std::sync::Arc;

use crate::error::Result;
pub use record::*;

/// A schedule store.
pub enum Store {
    /// In the process.
    Memory(memory::MemorySchedules),
    /// In Redis.
    Redis(Box<redis::RedisSchedules>),
}

impl Store {
    /// In memory, or in the Redis of `shared`.
    pub fn new(shared: Option<Arc<crate::shared_state::SharedState>>) -> Self {
        match shared {
            Some(shared) => Store::Redis(Box::new(redis::RedisSchedules::new(shared))),
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
    /// its state, if the claim still holds; whether it did (with the
    /// claim's own token as `due_ms`, a check that it holds).
    pub async fn release(&self, claim: &Claim, due_ms: i64) -> Result<bool> {
        match self {
            Store::Memory(m) => Ok(m.release(claim, due_ms)),
            Store::Redis(r) => r.release(claim, due_ms).await,
        }
    }
}
