//! Run-scoped calls of people and callers: answer an approval, answer a
//! request for input, cancel a run — on the run here, on a peer that has
//! it, or, for a durable run that no replica runs (parked, or its owner
//! elsewhere), through its inbox in the run store: an answer (or cancel) is
//! recorded there; a run whose owner runs it gets it at that replica's next
//! lease renewal; a parked run is claimed and resumed here at once, and
//! takes it as it starts.

use std::sync::Arc;

use baton_proto::v1 as pb;

use super::{
    orchestrator::{Caller, Orchestrator, audit, audited_id, not_found},
    resume::Claimed,
    upkeep::end_orphan,
};
use crate::{
    error::{Error, Result},
    run::{
        durable::{
            Claim, RedisRuns,
            inbox::{Answered, Question},
        },
        record::ApprovalAnswer,
    },
};

impl Orchestrator {
    /// A person's answer to approval `approval_id` of run `run_id`.
    pub async fn resolve_approval(
        &self,
        caller: &Caller,
        run_id: &str,
        approval_id: &str,
        answer: ApprovalAnswer,
    ) -> Result<()> {
        let answered = self
            .resolve_approval_here(caller, run_id, approval_id, answer)
            .await;
        audit("ResolveApproval", caller, audited_id(run_id), "", &answered);
        answered
    }

    async fn resolve_approval_here(
        &self,
        caller: &Caller,
        run_id: &str,
        approval_id: &str,
        answer: ApprovalAnswer,
    ) -> Result<()> {
        if approval_id.is_empty() {
            return Err(Error::invalid("approval_id", "must not be empty"));
        }
        let here = match self.run_of(caller, run_id) {
            Ok(run) => run.resolve_approval(approval_id, answer.clone()),
            Err(missing) => {
                return self
                    .answer_elsewhere(
                        caller,
                        run_id,
                        missing,
                        async |p, f| p.resolve_approval(f, run_id, approval_id, &answer).await,
                        Question::Approval(approval_id, answer.approved, &answer.reason),
                    )
                    .await;
            }
        };
        match here {
            // Not asked here: a durable run resumed on its way to it, or
            // parked since.
            Err(Error::NotFound { .. }) if self.services.durable.is_some() => {
                let question = Question::Approval(approval_id, answer.approved, &answer.reason);
                self.answer_stored(caller, run_id, question).await
            }
            other => other,
        }
    }

    /// A person's answer to request for input `input_id` of run `run_id`.
    pub async fn submit_input(
        &self,
        caller: &Caller,
        run_id: &str,
        input_id: &str,
        input: String,
    ) -> Result<()> {
        let answered = self
            .submit_input_here(caller, run_id, input_id, input)
            .await;
        audit("SubmitInput", caller, audited_id(run_id), "", &answered);
        answered
    }

    async fn submit_input_here(
        &self,
        caller: &Caller,
        run_id: &str,
        input_id: &str,
        input: String,
    ) -> Result<()> {
        if input_id.is_empty() {
            return Err(Error::invalid("input_id", "must not be empty"));
        }
        let here = match self.run_of(caller, run_id) {
            Ok(run) => run.submit_input(input_id, input.clone()),
            Err(missing) => {
                return self
                    .answer_elsewhere(
                        caller,
                        run_id,
                        missing,
                        async |p, f| p.submit_input(f, run_id, input_id, &input).await,
                        Question::Input(input_id, &input),
                    )
                    .await;
            }
        };
        match here {
            // Not asked here: a durable run resumed on its way to it, or
            // parked since.
            Err(Error::NotFound { .. }) if self.services.durable.is_some() => {
                self.answer_stored(caller, run_id, Question::Input(input_id, &input))
                    .await
            }
            other => other,
        }
    }

    /// An answer for a run that is not here: on the peer that has it, else
    /// (durable runs) through its inbox.
    async fn answer_elsewhere<F>(
        &self,
        caller: &Caller,
        run_id: &str,
        missing: Error,
        ask: F,
        question: Question<'_>,
    ) -> Result<()>
    where
        F: AsyncFnOnce(&crate::peers::Peers, &crate::peers::Forward) -> crate::peers::Answer<()>,
    {
        match self.on_peer(caller, run_id, missing, ask).await {
            Err(Error::NotFound { .. }) if self.services.durable.is_some() => {
                self.answer_stored(caller, run_id, question).await
            }
            other => other,
        }
    }

    /// Cancels run `run_id` and everything under it: its status after
    /// (`CANCELLED`, or the one it had ended with).
    pub async fn cancel(
        &self,
        caller: &Caller,
        run_id: &str,
        reason: &str,
    ) -> Result<pb::RunStatus> {
        let cancelled = self.cancel_here(caller, run_id, reason).await;
        audit("CancelRun", caller, audited_id(run_id), "", &cancelled);
        cancelled
    }

    async fn cancel_here(
        &self,
        caller: &Caller,
        run_id: &str,
        reason: &str,
    ) -> Result<pb::RunStatus> {
        let missing = match self.run_of(caller, run_id) {
            Ok(run) => return Ok(run.cancel_by_request(reason)),
            Err(missing) => missing,
        };
        let there = self
            .on_peer(caller, run_id, missing, async |p, f| {
                p.cancel_run(f, run_id, reason).await
            })
            .await;
        match there {
            // A durable run elsewhere, or parked.
            Err(Error::NotFound { .. }) if self.services.durable.is_some() => {
                self.cancel_stored(caller, run_id, reason).await
            }
            other => other,
        }
    }

    /// Records a person's answer to a question of a durable run that is
    /// not running here (see the module docs).
    async fn answer_stored(
        &self,
        caller: &Caller,
        run_id: &str,
        question: Question<'_>,
    ) -> Result<()> {
        let durable = self.stored_run_of(caller, run_id).await?;
        let (field, what, id) = match &question {
            Question::Approval(id, ..) => ("approval_id", "approval", id.to_string()),
            Question::Input(id, _) => ("input_id", "input request", id.to_string()),
        };
        let refused = |message: String| Error::FailedPrecondition { field, message };
        match durable.answer(run_id, question).await? {
            Answered::Gone => Err(not_found(run_id, "")),
            Answered::Ended(_) => Err(refused(format!(
                "run {run_id} has ended: nobody can answer its {what} {id:?} any more"
            ))),
            Answered::NotAsked => Err(Error::NotFound {
                field,
                message: format!("run {run_id} has no {what} {id:?} waiting"),
            }),
            Answered::AlreadyAnswered => {
                Err(refused(format!("{what} {id:?} was already answered")))
            }
            Answered::TooLate => Err(refused(format!("the deadline of {what} {id:?} has passed"))),
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
    async fn cancel_stored(
        &self,
        caller: &Caller,
        run_id: &str,
        reason: &str,
    ) -> Result<pb::RunStatus> {
        let durable = self.stored_run_of(caller, run_id).await?;
        match durable.request_cancel(run_id, reason).await? {
            Answered::Gone => Err(not_found(run_id, "")),
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
    async fn stored_run_of(&self, caller: &Caller, run_id: &str) -> Result<Arc<RedisRuns>> {
        let durable = self
            .services
            .durable
            .clone()
            .ok_or_else(|| not_found(run_id, ""))?;
        match durable.meta(run_id).await? {
            Some(meta) if meta.tenant == caller.tenant => Ok(durable),
            _ => Err(not_found(run_id, "")),
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
