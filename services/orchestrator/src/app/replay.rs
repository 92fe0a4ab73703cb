//! ReplayRun: a new run (new id, new trace, the caller's tenant) of an
//! ended run's request, against today's agents and models, answered from
//! the original's recording while it asks what the original asked (see
//! `run::recording::rerun`). Its history is read as a fork's is (`fork.rs`); it is
//! then started like any run of that request — durable when runs are.

use super::{
    orchestrator::{Caller, Orchestrator},
    start::{Started, audit_started},
};
use crate::{
    error::{Error, Result},
    request::{ReplayRequest, validate::check_filter},
    run::{launch, recording::rerun::Rerun},
};
use baton_proto::v1 as pb;

impl Orchestrator {
    /// Replays a run of the caller's tenant (see the module docs).
    pub async fn replay(&self, caller: &Caller, request: ReplayRequest) -> Result<Started> {
        let origin = request.run_id.clone();
        let started = self.try_replay(caller, request).await;
        audit_started("ReplayRun", caller, &origin, &started);
        started
    }

    async fn try_replay(&self, caller: &Caller, request: ReplayRequest) -> Result<Started> {
        self.check_running()?;
        check_filter(&request.filter, &self.services().defaults)?;
        let view = self.get(caller, &request.run_id).await?;
        if view.status == pb::RunStatus::Running {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "run {} is still running: a replay takes a whole recording, so replay it once it ends (or fork it at a point it has recorded)",
                    request.run_id
                ),
            });
        }
        let (history, stored, kind) = self.history(caller, &request.run_id, u64::MAX).await?;
        let Some(mut checked) = self.check_stored(kind, &stored)? else {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "the request of run {} cannot be read by this version",
                    request.run_id
                ),
            });
        };
        // A run in a conversation: the replay begins with the group member
        // the original began with (and appends to no conversation).
        let origin_link = self.origin_link(&request.run_id).await?;
        checked.begin_with(&self.services(), origin_link.as_ref());
        let (_, target) = checked.body.kind_and_target();
        let span = self.run_span(&caller.trace, "ReplayRun", kind, &target);
        checked.options.detach = request.detach;
        checked.options.filter = request.filter;
        checked.options.rerun = Some(Rerun::new(request.run_id.clone(), request.strict, history));
        let prepared = launch::prepare(
            &self.services(),
            span,
            kind,
            target,
            caller.tenant.clone(),
            checked.options,
            &self.runs_stop,
            None,
        );
        let _ = prepared
            .record
            .replay_of
            .set((request.run_id, request.strict));
        if let Some(link) = origin_link {
            // Its member kept for a resume; no conversation of its own.
            let _ = prepared.record.conversation.set(std::sync::Arc::new(
                crate::conversation::link::Link {
                    id: String::new(),
                    fold: 0,
                    summary: None,
                    compacted: None,
                    ..link
                },
            ));
        }
        let future = checked.body.future(&prepared.run);
        self.launch_with(prepared, checked.stored, None, future)
            .await
    }
}
