//! Scheduled runs: a schedule starts an ordinary detached run (of an
//! agent, a group or a pipeline, from a `RunAgentRequest` or
//! `RunPipelineRequest` it keeps) at each tick of a cron expression in a
//! time zone, or of an interval, until its end; each run is labelled with
//! it (`GetRun.schedule_id`).
//!
//! - [`spec`]: a definition checked (each bad field named) and its ticks;
//! - [`plan`]: what a schedule does at a time — fire, skip or queue on
//!   overlap, skip or run once after downtime — from its state alone;
//! - [`store`]: where schedules are kept, in the process or in Redis, and
//!   how a replica claims one (a lease per schedule, the claim's token
//!   fencing every write);
//! - [`runner`]: each replica's loop, which fires a tick exactly once: the
//!   tick is recorded with its run's id before the run starts, and the run
//!   store refuses a second run of one id.
//!
//! Schedules are a tenant's: made through the API (CreateSchedule …), or
//! declared in the agents file (`schedules:`, ids `file:<name>`, changed
//! only by changing the file). What the API shows of a schedule's run
//! request never carries its webhooks' secrets.

pub mod file;
pub mod plan;
pub mod runner;
pub mod spec;
pub mod store;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use baton_proto::v1 as pb;

use crate::{
    config::schedules::ScheduleConfig,
    error::{Error, Result},
    run::launch::now_ms,
};
pub use runner::{Fired, Starter};
use store::{State, Store, Stored};

/// Next fire times shown.
const NEXT_SHOWN: usize = 5;

/// The schedules of this server (see the module docs).
pub struct Schedules {
    store: Store,
    /// The server's config of them (set once the server reads it).
    config: std::sync::RwLock<ScheduleConfig>,
    /// Wakes this replica's scheduler (a schedule made or resumed here).
    wake: tokio::sync::Notify,
    /// The agents file's schedules are taken one file at a time.
    declaring: tokio::sync::Mutex<()>,
}

/// A schedule the agents file declares: its name (id `file:<name>`), its
/// tenant and its request.
#[derive(Debug, Clone)]
pub struct Declared {
    /// Its name in the file.
    pub name: String,
    /// Its tenant (`""`: the default one).
    pub tenant: String,
    /// What it is, as CreateSchedule would take it.
    pub request: pb::CreateScheduleRequest,
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        field: "schedule_id",
        message: format!("no schedule {id:?}"),
    }
}

impl Schedules {
    /// Schedules kept in the Redis of `shared` (durable runs), or in the
    /// process.
    pub fn new(
        config: &ScheduleConfig,
        shared: Option<Arc<crate::shared_state::SharedState>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store: Store::new(shared),
            config: std::sync::RwLock::new(config.clone()),
            wake: tokio::sync::Notify::new(),
            declaring: tokio::sync::Mutex::new(()),
        })
    }

    /// The server's config of them.
    pub fn config(&self) -> ScheduleConfig {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes the server's config of them (before its scheduler starts).
    pub fn configure(&self, config: &ScheduleConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config.clone();
    }

    /// Claims and fires this replica's share of the ticks due until
    /// `stop` (see [`runner`]).
    pub async fn run(self: Arc<Self>, starter: Arc<dyn Starter>, stop: CancellationToken) {
        let config = self.config();
        runner::Runner {
            store: &self.store,
            config: &config,
            wake: &self.wake,
        }
        .run(starter, stop)
        .await;
    }

    /// The definition of a checked request: `target` is what its runs
    /// run (an agent, group or pipeline name).
    fn definition(
        id: String,
        r: pb::CreateScheduleRequest,
        target: String,
        now: i64,
        from_file: bool,
    ) -> pb::Schedule {
        let cron = r.cron.trim().to_owned();
        let time_zone = if cron.is_empty() || !r.time_zone.is_empty() {
            r.time_zone
        } else {
            "UTC".to_owned()
        };
        let overlap = match pb::ScheduleOverlap::try_from(r.overlap) {
            Ok(pb::ScheduleOverlap::Unspecified) | Err(_) => pb::ScheduleOverlap::Skip,
            Ok(o) => o,
        };
        let missed = match pb::ScheduleMissed::try_from(r.missed) {
            Ok(pb::ScheduleMissed::Unspecified) | Err(_) => pb::ScheduleMissed::Skip,
            Ok(m) => m,
        };
        pb::Schedule {
            schedule_id: id,
            description: r.description,
            agent: r.agent.map(|a| pb::RunAgentRequest {
                detach: true,
                filter: None,
                ..a
            }),
            pipeline: r.pipeline.map(|p| pb::RunPipelineRequest {
                detach: true,
                filter: None,
                ..p
            }),
            cron,
            time_zone,
            interval: r.interval,
            end_at: r.end_at,
            overlap: overlap as i32,
            missed: missed as i32,
            created_at: Some(spec::timestamp(now)),
            from_agents_file: from_file,
            target,
            ..Default::default()
        }
    }

    /// Makes a schedule of `tenant` from a request whose run was checked
    /// (`target`: what it runs).
    pub async fn create(
        &self,
        tenant: &str,
        r: pb::CreateScheduleRequest,
        target: String,
    ) -> Result<pb::Schedule> {
        let now = now_ms();
        let spec = spec::check(&r, now, self.config().min_interval)?;
        let paused = r.paused;
        let id = format!("sch_{}", uuid::Uuid::new_v4().simple());
        let def = Self::definition(id.clone(), r, target, now, false);
        let s = Stored {
            id,
            tenant: tenant.to_owned(),
            def,
            paused,
            resumed_ms: now,
            state: State {
                last_ms: now,
                ..State::default()
            },
        };
        let due = if paused { None } else { spec.next_after(now) };
        if !self
            .store
            .put(&s, due, false, self.config().max_per_tenant)
            .await?
        {
            return Err(Error::Exhausted {
                field: "schedule_id".into(),
                message: format!(
                    "the tenant has {} schedules, the server's schedules.max_per_tenant; delete one first",
                    self.config().max_per_tenant
                ),
            });
        }
        self.wake.notify_one();
        Ok(self.view(&s, now))
    }

    /// Takes the agents file's schedules (checked by the caller: each
    /// with its target): adds the new, updates the changed (keeping where
    /// they stand), deletes those the file no longer declares.
    pub async fn declare(&self, declared: Vec<(Declared, String)>) -> Result<()> {
        let now = now_ms();
        let mut ids = std::collections::HashSet::new();
        for (d, target) in declared {
            let id = format!("file:{}", d.name);
            let due = match spec::check(&d.request, now, self.config().min_interval) {
                Ok(spec) => spec.next_after(now),
                // Ended already: kept, as ended.
                Err(e) if e.field() == Some("end_at") => None,
                Err(e) => {
                    tracing::warn!(schedule = %d.name, error = %e, "an agents-file schedule is left out");
                    continue;
                }
            };
            ids.insert(id.clone());
            let paused = d.request.paused;
            let mut def = Self::definition(id.clone(), d.request, target, now, true);
            // Declared again (a replica starting, the file reloaded): it
            // keeps its creation (an interval counts from it), and is left
            // as it is when nothing changed.
            if let Some(old) = self.store.get(&id).await? {
                def.created_at = old.def.created_at;
                if old.def == def && old.paused == paused && old.tenant == d.tenant {
                    continue;
                }
            }
            let due = match (&def.interval, def.created_at.as_ref()) {
                (Some(_), Some(_)) => spec::Spec::of(&def)?.next_after(now),
                _ => due,
            };
            let s = Stored {
                id,
                tenant: d.tenant,
                def,
                paused,
                resumed_ms: now,
                state: State {
                    last_ms: now,
                    ..State::default()
                },
            };
            self.store.put(&s, due, true, usize::MAX).await?;
        }
        for (tenant, id) in self.store.declared().await? {
            if !ids.contains(&id) {
                self.store.delete(&tenant, &id).await?;
            }
        }
        self.wake.notify_one();
        Ok(())
    }

    /// Held while the agents file's schedules are read and taken: one
    /// file at a time, the newest last.
    pub async fn declaring(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.declaring.lock().await
    }

    /// A schedule of `tenant` (another tenant's is not found).
    pub async fn stored(&self, tenant: &str, id: &str) -> Result<Stored> {
        match self.store.get(id).await? {
            Some(s) if s.tenant == tenant => Ok(s),
            _ => Err(not_found(id)),
        }
    }

    /// A tenant's schedules, oldest first.
    pub async fn list(&self, tenant: &str) -> Result<Vec<Stored>> {
        self.store.list(tenant).await
    }

    fn changeable(s: &Stored) -> Result<()> {
        if s.def.from_agents_file {
            return Err(Error::FailedPrecondition {
                field: "schedule_id",
                message: format!(
                    "schedule {:?} is declared in the agents file: change the file",
                    s.id
                ),
            });
        }
        Ok(())
    }

    /// Deletes a schedule; its runs go on.
    pub async fn delete(&self, tenant: &str, id: &str) -> Result<()> {
        let s = self.stored(tenant, id).await?;
        Self::changeable(&s)?;
        if self.store.delete(tenant, id).await? {
            Ok(())
        } else {
            Err(not_found(id))
        }
    }

    /// Pauses or resumes a schedule; resumed, it fires from its next tick
    /// (the ticks while it was paused are not fired).
    pub async fn set_paused(&self, tenant: &str, id: &str, paused: bool) -> Result<Stored> {
        let s = self.stored(tenant, id).await?;
        Self::changeable(&s)?;
        if s.paused == paused {
            return Ok(s);
        }
        let now = now_ms();
        let due = if paused {
            None
        } else {
            spec::Spec::of(&s.def)?.next_after(now)
        };
        if !self.store.set_paused(id, paused, now, due).await? {
            return Err(not_found(id));
        }
        if !paused {
            self.wake.notify_one();
        }
        self.stored(tenant, id).await
    }

    /// A schedule as the API shows it at `now`: its definition (its
    /// webhooks' secrets cleared), whether paused, its next fire times and
    /// its recent ticks (their runs' status left to the caller).
    pub fn view(&self, s: &Stored, now: i64) -> pb::Schedule {
        let mut v = s.def.clone();
        v.paused = s.paused;
        let hide = |hooks: &mut Vec<pb::RunWebhook>| {
            for h in hooks {
                for secret in [&mut h.secret, &mut h.authorization, &mut h.token] {
                    if !secret.is_empty() {
                        *secret = "(hidden)".into();
                    }
                }
            }
        };
        if let Some(a) = &mut v.agent {
            hide(&mut a.webhooks);
        }
        if let Some(p) = &mut v.pipeline {
            hide(&mut p.webhooks);
        }
        if !s.paused
            && let Ok(spec) = spec::Spec::of(&s.def)
        {
            let from = s.base_ms().max(now);
            let mut next = Vec::with_capacity(NEXT_SHOWN);
            if let Some(q) = s.state.queued_ms {
                next.push(q);
            }
            next.extend(spec.next_n(from, NEXT_SHOWN - next.len()));
            v.next_fire_times = next.into_iter().map(spec::timestamp).collect();
        }
        v.recent = s
            .state
            .recent
            .iter()
            .map(|t| pb::ScheduleTick {
                tick_at: Some(spec::timestamp(t.tick_ms)),
                handled_at: Some(spec::timestamp(t.handled_ms)),
                outcome: t.outcome,
                run_id: t.run_id.clone(),
                run_status: 0,
                missed: t.missed,
                message: t.message.clone(),
            })
            .collect();
        v
    }
}
