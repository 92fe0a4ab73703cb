//! ResolveApproval, SubmitInput and CancelRun of a durable run this
//! replica does not run: the answer (or cancel) is recorded in the run's
//! inbox in Redis (see `run::durable::inbox`). A run whose owner runs it
//! gets it at that replica's next lease renewal; a parked run is claimed
//! and resumed here at once, and takes it as it starts.

use std::sync::Arc;

use baton_proto::v1 as pb;
use tonic::Status;

use super::{OrchestratorService, resume::Claimed};
use crate::{
    auth::tenant_of,
    error::Error,
    run::{
        durable::{
            Claim, RedisRuns,
            inbox::{Answered, Question},
        },
        leases::end_orphan,
    },
};

impl OrchestratorService {
    /// Records a person's answer to a question of a durable run that is
    /// not running here (see the module docs).
    pub(super) async fn answer_stored(
        &self,
        ext: &tonic::Extensions,
        run_id: &str,
        question: Question<'_>,
    ) -> Result<(), Status> {
        let durable = self.stored_run_of(ext, run_id).await?;
        let (field, what, id) = match &question {
            Question::Approval(id, ..) => ("approval_id", "approval", id.to_string()),
            Question::Input(id, _) => ("input_id", "input request", id.to_string()),
        };
        let answered = durable.answer(run_id, question).await?;
        let refused = |message: String| Error::FailedPrecondition { field, message };
        match answered {
            Answered::Gone => Err(not_found(run_id).into()),
            Answered::Ended(_) => Err(refused(format!(
                "run {run_id} has ended: nobody can answer its {what} {id:?} any more"
            ))
            .into()),
            Answered::NotAsked => Err(Error::NotFound {
                field,
                message: format!("run {run_id} has no {what} {id:?} waiting"),
            }
            .into()),
            Answered::AlreadyAnswered => {
                Err(refused(format!("{what} {id:?} was already answered")).into())
            }
            Answered::TooLate => {
                Err(refused(format!("the deadline of {what} {id:?} has passed")).into())
            }
            Answered::Recorded { parked } => {
                if parked {
                    self.wake(&durable, run_id).await;
                }
                Ok(())
            }
        }
    }

    /// Cancels a durable run that is not running here: the status after
    /// (`CANCELLED`, or the one it had ended with).
    pub(super) async fn cancel_stored(
        &self,
        ext: &tonic::Extensions,
        run_id: &str,
        reason: &str,
    ) -> Result<pb::RunStatus, Status> {
        let durable = self.stored_run_of(ext, run_id).await?;
        match durable.request_cancel(run_id, reason).await? {
            Answered::Gone => Err(not_found(run_id).into()),
            Answered::Ended(status) => {
                Ok(pb::RunStatus::try_from(status).unwrap_or(pb::RunStatus::Unspecified))
            }
            Answered::Recorded { parked } => {
                if parked {
                    self.wake(&durable, run_id).await;
                }
                Ok(pb::RunStatus::Cancelled)
            }
            _ => Ok(pb::RunStatus::Running),
        }
    }

    /// The run store, when it knows `run_id` as a run of the caller's
    /// tenant.
    async fn stored_run_of(
        &self,
        ext: &tonic::Extensions,
        run_id: &str,
    ) -> Result<Arc<RedisRuns>, Status> {
        let durable = self
            .services
            .durable
            .clone()
            .ok_or_else(|| Status::from(not_found(run_id)))?;
        match durable.meta(run_id).await? {
            Some(meta) if meta.tenant == tenant_of(ext) => Ok(durable),
            _ => Err(not_found(run_id).into()),
        }
    }

    /// Claims a parked run and resumes it here.
    async fn wake(&self, durable: &RedisRuns, run_id: &str) {
        match durable.claim_parked(run_id).await {
            Ok(Claim::Claimed {
                epoch,
                previous_owner,
                last_seq,
                trace_id,
            }) => {
                let claimed = Claimed {
                    run_id: run_id.to_owned(),
                    epoch,
                    last_seq,
                };
                if !self.resume(claimed).await {
                    end_orphan(durable, run_id, epoch, &previous_owner, last_seq, &trace_id).await;
                }
            }
            // Its owner runs it, or another replica woke it first.
            Ok(_) => {}
            // It wakes at its deadline, and takes the answer then.
            Err(e) => tracing::warn!(run_id, error = %e, "cannot wake a parked run"),
        }
    }
}

fn not_found(run_id: &str) -> Error {
    Error::NotFound {
        field: "run_id",
        message: format!("no run {run_id:?}"),
    }
}
