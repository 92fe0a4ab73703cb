//! The schedules API of the core (CreateSchedule … DeleteSchedule), each
//! call audited, and what the scheduler asks of the core (see
//! `crate::schedule`): start a tick's run with the id the tick chose,
//! labelled with its schedule, and tell whether a run still runs.

use std::sync::Arc;

use baton_proto::v1 as pb;

use super::{
    orchestrator::{Caller, Orchestrator, audit},
    start::{Checked, Origin},
};
use crate::{
    error::{Error, Result},
    request::{
        AgentRequest, PipelineRequest,
        validate::{agent_run, pipeline_run},
    },
    run::shared::Shared,
    schedule::{Declared, Fired, Starter, store::Stored},
};

/// `e` with its field named under `prefix` (`agent.input`).
fn under(prefix: &str, e: Error) -> Error {
    match e {
        Error::InvalidArgument { field, message } => Error::InvalidArgument {
            field: format!("{prefix}.{field}").into(),
            message,
        },
        Error::Exhausted { field, message } => Error::Exhausted {
            field: format!("{prefix}.{field}").into(),
            message,
        },
        other => other,
    }
}

impl Orchestrator {
    /// The run a schedule starts, checked against `services` as RunAgent
    /// or RunPipeline would check it (fields named under `agent.` or
    /// `pipeline.`); what it runs.
    fn check_scheduled(
        &self,
        services: &Shared,
        agent: Option<&pb::RunAgentRequest>,
        pipeline: Option<&pb::RunPipelineRequest>,
    ) -> Result<(Checked, String)> {
        let mut checked: Checked = match (agent, pipeline) {
            (Some(a), _) => {
                let r = AgentRequest::try_from(pb::RunAgentRequest {
                    detach: true,
                    ..a.clone()
                })
                .map_err(|e| under("agent", e))?;
                agent_run(services, r)
                    .map_err(|e| under("agent", e))?
                    .into()
            }
            (None, Some(p)) => {
                let r = PipelineRequest::try_from(pb::RunPipelineRequest {
                    detach: true,
                    ..p.clone()
                })
                .map_err(|e| under("pipeline", e))?;
                pipeline_run(services, r)
                    .map_err(|e| under("pipeline", e))?
                    .into()
            }
            (None, None) => {
                return Err(Error::invalid(
                    "agent",
                    "give the run to start: agent (an agent or group) or pipeline",
                ));
            }
        };
        let prefix = if agent.is_some() { "agent" } else { "pipeline" };
        let hooks = std::mem::take(&mut checked.options.webhooks);
        self.webhooks
            .check_own(hooks.clone())
            .map_err(|e| under(prefix, e))?;
        checked.options.webhooks = hooks;
        let (_, target) = checked.body.kind_and_target();
        Ok((checked, target))
    }

    /// CreateSchedule.
    pub async fn create_schedule(
        &self,
        caller: &Caller,
        r: pb::CreateScheduleRequest,
    ) -> Result<pb::Schedule> {
        let made = async {
            // The timing first: its errors name the schedule's own fields.
            crate::schedule::spec::check(
                &r,
                crate::run::launch::now_ms(),
                self.schedules.config().min_interval,
            )?;
            if let Some(a) = &r.agent
                && a.new_conversation
                && !a.conversation_id.is_empty()
            {
                return Err(Error::invalid(
                    "agent.new_conversation",
                    "would start the same conversation at every tick (the second is refused): leave it unset to continue the conversation",
                ));
            }
            let (_, target) =
                self.check_scheduled(&self.services(), r.agent.as_ref(), r.pipeline.as_ref())?;
            self.schedules.create(&caller.tenant, r, target).await
        }
        .await;
        audit("CreateSchedule", caller, "", "", &made);
        let made = made?;
        tracing::info!(tenant = %caller.tenant, schedule_id = %made.schedule_id, target = %made.target, "schedule created");
        Ok(made)
    }

    /// A schedule as the API shows it, its recent runs' status read when
    /// `all_runs` (else the latest tick's only).
    async fn schedule_view(&self, caller: &Caller, s: &Stored, all_runs: bool) -> pb::Schedule {
        let mut v = self.schedules.view(s, crate::run::launch::now_ms());
        let mut seen = false;
        for t in &mut v.recent {
            if t.run_id.is_empty() {
                continue;
            }
            if seen && !all_runs {
                break;
            }
            seen = true;
            if let Ok(run) = self.get(caller, &t.run_id).await {
                t.run_status = run.status as i32;
            }
        }
        v
    }

    /// GetSchedule.
    pub async fn get_schedule(&self, caller: &Caller, id: &str) -> Result<pb::Schedule> {
        let s = self.schedules.stored(&caller.tenant, id).await?;
        Ok(self.schedule_view(caller, &s, true).await)
    }

    /// ListSchedules.
    pub async fn list_schedules(&self, caller: &Caller) -> Result<pb::ListSchedulesResponse> {
        let all = self.schedules.list(&caller.tenant).await?;
        let mut schedules = Vec::with_capacity(all.len());
        for s in &all {
            schedules.push(self.schedule_view(caller, s, false).await);
        }
        Ok(pb::ListSchedulesResponse { schedules })
    }

    /// PauseSchedule and ResumeSchedule.
    pub async fn pause_schedule(
        &self,
        caller: &Caller,
        id: &str,
        paused: bool,
    ) -> Result<pb::Schedule> {
        let done = self.schedules.set_paused(&caller.tenant, id, paused).await;
        let method = if paused {
            "PauseSchedule"
        } else {
            "ResumeSchedule"
        };
        audit(method, caller, "", "", &done);
        let s = done?;
        tracing::info!(tenant = %caller.tenant, schedule_id = id, paused, "schedule paused or resumed");
        Ok(self.schedule_view(caller, &s, true).await)
    }

    /// DeleteSchedule.
    pub async fn delete_schedule(&self, caller: &Caller, id: &str) -> Result<()> {
        let done = self.schedules.delete(&caller.tenant, id).await;
        audit("DeleteSchedule", caller, "", "", &done);
        done?;
        tracing::info!(tenant = %caller.tenant, schedule_id = id, "schedule deleted");
        Ok(())
    }

    /// Takes the agents file's schedules: each checked against the
    /// current agents (one that does not check is left out, logged).
    pub async fn declare_schedules(&self, declared: Vec<Declared>) -> Result<()> {
        let services = self.services();
        let mut taken = Vec::with_capacity(declared.len());
        for d in declared {
            match self.check_scheduled(
                &services,
                d.request.agent.as_ref(),
                d.request.pipeline.as_ref(),
            ) {
                Ok((_, target)) => taken.push((d, target)),
                Err(e) => {
                    tracing::warn!(schedule = %d.name, error = %e, "an agents-file schedule is left out")
                }
            }
        }
        self.schedules.declare(taken).await
    }
}

#[async_trait::async_trait]
impl Starter for Orchestrator {
    async fn fire(&self, s: &Stored, run_id: &str, tick_ms: i64) -> Fired {
        if let Err(e) = self.check_running() {
            return Fired::Retry(e.to_string());
        }
        let services = self.services();
        // Started by a replica before this one (which died before it
        // recorded the tick): found, not started again.
        if let Some(durable) = &services.durable {
            match durable.meta(run_id).await {
                Ok(Some(_)) => return Fired::Existed,
                Ok(None) => {}
                Err(e) => return Fired::Retry(e.to_string()),
            }
        } else if self.runs.get(run_id).is_ok() {
            return Fired::Existed;
        }
        // A tick does not wait for its conversation's running run (it
        // would hold the schedule meanwhile): refused, recorded why.
        let agent = s.def.agent.clone().map(|a| pb::RunAgentRequest {
            conversation_busy: pb::ConversationBusy::Refuse as i32,
            ..a
        });
        let checked = match self.check_scheduled(&services, agent.as_ref(), s.def.pipeline.as_ref())
        {
            Ok((checked, _)) => checked,
            Err(e) => return Fired::Refused(e.to_string()),
        };
        let caller = Caller {
            tenant: s.tenant.clone(),
            ..Caller::default()
        };
        let method = if s.def.agent.is_some() {
            "RunAgent"
        } else {
            "RunPipeline"
        };
        let origin = Origin {
            schedule: Some((s.id.clone(), tick_ms)),
            run_id: Some(run_id.to_owned()),
            ..Origin::default()
        };
        let started = self.start(&caller, method, checked, services, origin).await;
        super::start::audit_started(method, &caller, "", &started);
        match started {
            // Detached: it runs on without this stream.
            Ok(_) => Fired::Started,
            Err(Error::AlreadyExists {
                field: "run_id", ..
            }) => Fired::Existed,
            Err(e @ (Error::Unavailable(_) | Error::ShuttingDown)) => Fired::Retry(e.to_string()),
            Err(e) => Fired::Refused(e.to_string()),
        }
    }

    async fn exists(&self, tenant: &str, run_id: &str) -> std::result::Result<bool, String> {
        match &self.services().durable {
            Some(durable) => match durable.meta(run_id).await {
                Ok(meta) => Ok(meta.is_some_and(|m| m.tenant == tenant)),
                Err(e) => Err(e.to_string()),
            },
            None => Ok(self.runs.get(run_id).is_ok()),
        }
    }

    async fn running(&self, tenant: &str, run_id: &str) -> std::result::Result<bool, String> {
        let caller = Caller {
            tenant: tenant.to_owned(),
            ..Caller::default()
        };
        match self.get(&caller, run_id).await {
            Ok(run) => Ok(run.status == pb::RunStatus::Running),
            Err(Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Takes the schedules of `core`'s agents file (tried again a few times
/// while Redis does not answer).
pub async fn declare_from_file(core: Orchestrator) {
    let schedules = core.schedules.clone();
    let _one_file_at_a_time = schedules.declaring().await;
    let declared = match crate::schedule::file::declared(&core.catalog()) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "the agents file's schedules are not taken");
            return;
        }
    };
    for attempt in 0..10 {
        match core.declare_schedules(declared.clone()).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, attempt, "the agents file's schedules are not taken yet");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
        }
    }
}

/// The scheduler of `core`, until `stop`.
pub fn scheduler(
    core: &Orchestrator,
    stop: tokio_util::sync::CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let schedules = core.schedules.clone();
    let starter: Arc<dyn Starter> = Arc::new(core.clone());
    schedules.run(starter, stop)
}
