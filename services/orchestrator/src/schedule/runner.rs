//! Each replica's scheduler ([`Schedules::run`]): claims the schedules
//! due, and for each one handles what [`plan`] says, firing a tick in two
//! writes:
//!
//! 1. the tick is recorded as **pending** with the id chosen for its run
//!    (while the claim holds);
//! 2. the run is started with that id, labelled with the schedule; then
//!    the tick is recorded as fired and the pending entry cleared.
//!
//! A replica killed between the two leaves the pending tick to the next
//! holder, which starts the same run id: the run store refuses a second
//! run of one id, so the tick fires once whether or not the first replica
//! got as far as starting it. A holder whose claim lapsed writes nothing.

use std::{sync::Arc, time::Duration};

use baton_proto::v1::{ScheduleOverlap, ScheduleTickOutcome as Outcome};
use tokio_util::sync::CancellationToken;

use super::{
    plan::{Step, plan},
    spec::Spec,
    store::{Claim, Pending, Store, Stored, Tick},
};
use crate::config::schedules::ScheduleConfig;

/// Most schedules a replica claims at once.
const CLAIM_AT_ONCE: usize = 16;

/// How a tick's run start went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// Started here.
    Started,
    /// A run of that id exists (a replica before this one started it).
    Existed,
    /// Refused for good (the agent is gone, the quota is full …): the
    /// tick is recorded with why.
    Refused(String),
    /// Not now (Redis away, shutting down): tried again later.
    Retry(String),
}

/// What starts a tick's run and tells whether a run still runs: the
/// application core.
#[async_trait::async_trait]
pub trait Starter: Send + Sync + 'static {
    /// Starts schedule `s`'s run of tick `tick_ms`, with id `run_id`.
    async fn fire(&self, s: &Stored, run_id: &str, tick_ms: i64) -> Fired;
    /// Whether `tenant`'s run `run_id` is still running.
    async fn running(&self, tenant: &str, run_id: &str) -> Result<bool, String>;
    /// Whether a run `run_id` of `tenant` was started.
    async fn exists(&self, tenant: &str, run_id: &str) -> Result<bool, String>;
}

/// A replica's scheduler over a store.
pub struct Runner<'a> {
    /// Where the schedules are.
    pub store: &'a Store,
    /// The server's config of them.
    pub config: &'a ScheduleConfig,
    /// Wakes it (a schedule made or resumed here).
    pub wake: &'a tokio::sync::Notify,
}

impl Runner<'_> {
    /// Claims and handles schedules due until `stop`.
    pub async fn run(&self, starter: Arc<dyn Starter>, stop: CancellationToken) {
        let poll = self.config.poll;
        let lease_ms = self.config.lease.as_millis() as i64;
        loop {
            let wait = match self.store.claim(CLAIM_AT_ONCE, lease_ms).await {
                Ok(claimed) => {
                    for claim in &claimed.claims {
                        if stop.is_cancelled() {
                            // Due again now, for another replica.
                            let _ = self.store.release(claim, claimed.now_ms).await;
                            continue;
                        }
                        self.handle(starter.as_ref(), claim, claimed.now_ms).await;
                    }
                    if claimed.claims.len() == CLAIM_AT_ONCE {
                        Duration::ZERO
                    } else {
                        claimed
                            .next_due_ms
                            .map(|d| Duration::from_millis((d - claimed.now_ms).max(0) as u64))
                            .map_or(poll, |d| d.min(poll))
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot look for schedules due");
                    poll
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    /// Handles one claimed schedule at `now` (the store's clock).
    async fn handle(&self, starter: &dyn Starter, claim: &Claim, now: i64) {
        let poll = self.config.poll.as_millis() as i64;
        let s = match self.store.get(&claim.id).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                // Deleted: out of the due set.
                let _ = self.store.write(claim, &Default::default(), None).await;
                return;
            }
            Err(e) => {
                tracing::debug!(schedule_id = %claim.id, error = %e, "schedule not read; later");
                let _ = self.store.release(claim, now + poll).await;
                return;
            }
        };
        if s.paused {
            let _ = self.store.write(claim, &s.state, None).await;
            return;
        }
        let spec = match Spec::of(&s.def) {
            Ok(spec) => spec,
            Err(e) => {
                tracing::warn!(schedule_id = %s.id, error = %e, "a schedule no longer reads; it stops");
                let _ = self.store.write(claim, &s.state, None).await;
                return;
            }
        };
        if let Some(pending) = s.state.pending.clone() {
            // Still ours (a holder that took long may have lost it)?
            let token = claim.token.parse::<i64>().unwrap_or_default();
            if !matches!(self.store.release(claim, token).await, Ok(true)) {
                return;
            }
            return self.fire(starter, claim, &s, &spec, pending, now).await;
        }
        let previous_running = if s.state.run_id.is_empty()
            || (spec.overlap == ScheduleOverlap::Allow && s.state.queued_ms.is_none())
        {
            false
        } else {
            match starter.running(&s.tenant, &s.state.run_id).await {
                Ok(running) => running,
                Err(e) => {
                    tracing::debug!(schedule_id = %s.id, error = %e, "previous run not read; later");
                    let _ = self.store.release(claim, now + poll).await;
                    return;
                }
            }
        };
        let late = self.config.late_after.as_millis() as i64;
        let mut state = s.state.clone();
        // A tick queued before the schedule was paused is not fired.
        if state.queued_ms.is_some_and(|q| q < s.resumed_ms) {
            state.queued_ms = None;
        }
        let due = match plan(&spec, &state, s.base_ms(), now, late, previous_running) {
            Step::Wait { due_ms } => due_ms,
            Step::Record {
                ticks,
                last_ms,
                queued_ms,
            } => {
                for t in ticks {
                    tracing::info!(schedule_id = %s.id, tick_ms = t.tick_ms, outcome = ?Outcome::try_from(t.outcome).unwrap_or_default(), "schedule tick not fired");
                    state.record(t);
                }
                state.last_ms = state.last_ms.max(last_ms);
                state.queued_ms = queued_ms;
                let next = spec.next_after(state.last_ms.max(s.resumed_ms));
                match queued_ms {
                    // Waiting for the previous run: look again soon.
                    Some(_) => Some(next.map_or(now + poll, |n| n.min(now + poll))),
                    None => next,
                }
            }
            Step::Fire {
                tick_ms,
                queued,
                missed,
            } => {
                let pending = Pending {
                    tick_ms,
                    run_id: uuid::Uuid::now_v7().to_string(),
                    queued,
                    missed,
                };
                state.pending = Some(pending.clone());
                // Recorded before the run starts; the claim holds on.
                let token = claim.token.parse::<i64>().unwrap_or(now + poll);
                match self.store.write(claim, &state, Some(token)).await {
                    Ok(true) => {
                        let s = Stored { state, ..s };
                        return self.fire(starter, claim, &s, &spec, pending, now).await;
                    }
                    Ok(false) => return,
                    Err(e) => {
                        tracing::debug!(schedule_id = %s.id, error = %e, "tick not recorded; later");
                        let _ = self.store.release(claim, now + poll).await;
                        return;
                    }
                }
            }
        };
        if let Err(e) = self.store.write(claim, &state, due).await {
            tracing::debug!(schedule_id = %s.id, error = %e, "schedule not written; later");
            let _ = self.store.release(claim, now + poll).await;
        }
    }

    /// Starts the pending tick's run (or finds it started), then records
    /// the tick.
    async fn fire(
        &self,
        starter: &dyn Starter,
        claim: &Claim,
        s: &Stored,
        spec: &Spec,
        pending: Pending,
        now: i64,
    ) {
        let poll = self.config.poll.as_millis() as i64;
        let mut state = s.state.clone();
        let tick = |outcome: Outcome, run_id: &str, missed: u32, message: String| Tick {
            tick_ms: pending.tick_ms,
            handled_ms: now,
            outcome: outcome as i32,
            run_id: run_id.to_owned(),
            missed,
            message,
        };
        // A tick being fired when the schedule was paused: its run is
        // looked for, not started (a paused schedule's ticks do not fire).
        let fired = if pending.tick_ms < s.resumed_ms {
            match starter.exists(&s.tenant, &pending.run_id).await {
                Ok(true) => Fired::Existed,
                Ok(false) => {
                    Fired::Refused("not started: the schedule was paused while this tick was being fired, and its run is not found".into())
                }
                Err(e) => Fired::Retry(e),
            }
        } else {
            starter.fire(s, &pending.run_id, pending.tick_ms).await
        };
        match fired {
            Fired::Started | Fired::Existed => {
                if pending.missed > 0 {
                    state.record(tick(Outcome::Missed, "", pending.missed, String::new()));
                }
                state.record(tick(Outcome::Fired, &pending.run_id, 0, String::new()));
                state.run_id = pending.run_id.clone();
                tracing::info!(schedule_id = %s.id, tick_ms = pending.tick_ms, run_id = %pending.run_id, "schedule fired");
            }
            Fired::Refused(message) => {
                tracing::warn!(schedule_id = %s.id, tick_ms = pending.tick_ms, %message, "a schedule's run was refused");
                state.record(tick(Outcome::Refused, "", 0, message));
            }
            Fired::Retry(message) => {
                tracing::debug!(schedule_id = %s.id, %message, "a schedule's run did not start; later");
                let _ = self.store.release(claim, now + poll).await;
                return;
            }
        }
        state.pending = None;
        if pending.queued {
            state.queued_ms = None;
        }
        state.last_ms = state.last_ms.max(pending.tick_ms);
        let due = spec.next_after(state.last_ms.max(s.resumed_ms));
        match self.store.write(claim, &state, due).await {
            Ok(_) => {}
            Err(e) => {
                // The pending tick stays: the next holder finds its run.
                tracing::debug!(schedule_id = %s.id, error = %e, "fired tick not recorded; its run is found later");
                let _ = self.store.release(claim, now + poll).await;
            }
        }
    }
}
