//! Run-scoped calls of people and callers: answer an approval, answer a
//! request for input, cancel a run.
//!
//! Where the answer goes:
//! - the run is here (and this replica's, see `RunRecord::is_ours`): with
//!   durable runs the answer is first recorded in the run's inbox in the
//!   run store — one script that checks the question is open and
//!   unanswered, so of two answers given anywhere exactly one is taken,
//!   and a taken answer outlives this replica — then handed to the run;
//!   in memory mode it is handed to the run;
//! - on a peer (`peers.endpoints`): asked of every replica, and answered
//!   only by the one running the run — a forwarded call is answered from
//!   that replica's runs in memory and never from the run store, so one
//!   answer is recorded at most once whatever the peer list (it may list
//!   this replica itself, as a Kubernetes headless Service does);
//! - otherwise (durable runs that no replica runs here or on a peer:
//!   parked, or its owner elsewhere): recorded in its inbox by this
//!   replica; a run whose owner runs it gets it at that replica's next
//!   lease renewal, a parked run is woken (claimed and resumed) here in the
//!   background — and, should this replica stop first, it is claimable at
//!   once, so any replica resumes it within a third of the lease.
//!
//! A cancel goes the same ways (recorded in the inbox too, so a replica
//! that resumes the run before its end is logged cancels it again).

use std::sync::Arc;

use baton_proto::v1 as pb;

use super::{
    orchestrator::{Caller, Orchestrator, audit, audited_id, not_found},
    resume::Claimed,
    upkeep::end_orphan,
};
use crate::{
    error::{Error, Result},
    peers::{Answer, Forward, Peers},
    run::{
        durable::{
            Claim, RedisRuns,
            inbox::{Answered, Question},
        },
        record::{ApprovalAnswer, RunRecord, mono_ms},
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
        let answered = if approval_id.is_empty() {
            Err(Error::invalid("approval_id", "must not be empty"))
        } else {
            let question = Question::Approval(approval_id, answer.approved, &answer.reason);
            self.answer(caller, run_id, question, async |p, f| {
                p.resolve_approval(f, run_id, approval_id, &answer).await
            })
            .await
        };
        audit("ResolveApproval", caller, audited_id(run_id), "", &answered);
        answered
    }

    /// A person's answer to request for input `input_id` of run `run_id`.
    pub async fn submit_input(
        &self,
        caller: &Caller,
        run_id: &str,
        input_id: &str,
        input: String,
    ) -> Result<()> {
        let answered = if input_id.is_empty() {
            Err(Error::invalid("input_id", "must not be empty"))
        } else {
            self.answer(
                caller,
                run_id,
                Question::Input(input_id, &input),
                async |p, f| p.submit_input(f, run_id, input_id, &input).await,
            )
            .await
        };
        audit("SubmitInput", caller, audited_id(run_id), "", &answered);
        answered
    }

    /// An answer to `question` of run `run_id`: here, on the peer running
    /// it (`forward`), or through its inbox (see the module docs).
    async fn answer<F>(
        &self,
        caller: &Caller,
        run_id: &str,
        question: Question<'_>,
        forward: F,
    ) -> Result<()>
    where
        F: AsyncFnOnce(&Peers, &Forward) -> Answer<()>,
    {
        // The call's token: a peer's forwarded call carries its caller's
        // (see `durable::inbox`).
        let mut caller = caller.clone();
        let token = caller
            .forward
            .answer_token
            .get_or_insert_with(|| uuid::Uuid::new_v4().simple().to_string())
            .clone();
        let caller = &caller;
        let missing = match self.run_of(caller, run_id) {
            Ok(run) => return self.answer_here(&run, question, &token).await,
            Err(missing) => missing,
        };
        match self.on_peer(caller, run_id, missing, forward).await {
            // Nobody runs it (or the caller is a peer: it answers from its
            // own runs only). A peer that ran it may have taken this very
            // answer and not said so in time: the token tells.
            Err(Error::NotFound { .. } | Error::Unavailable(_))
                if self.services().durable.is_some() && !caller.forward.forwarded =>
            {
                self.answer_stored(caller, run_id, question, &token).await
            }
            other => other,
        }
    }

    /// An answer to a run running here: recorded in the run store first
    /// when runs are durable, then handed to the run.
    async fn answer_here(
        &self,
        run: &Arc<RunRecord>,
        question: Question<'_>,
        token: &str,
    ) -> Result<()> {
        let give = |run: &RunRecord| match &question {
            Question::Approval(id, approved, reason) => run.resolve_approval(
                id,
                ApprovalAnswer {
                    approved: *approved,
                    reason: (*reason).to_owned(),
                },
            ),
            Question::Input(id, input) => run.submit_input(id, (*input).to_owned()),
        };
        if run.epoch.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return give(run);
        }
        let (id, field, _) = question.named();
        crate::run::record::check_id(field, id)?;
        let Some(durable) = self.services().durable.clone() else {
            return give(run);
        };
        self.record_answer(durable, &run.run_id, question, token)
            .await?;
        // Recorded: the run takes it now. A run resumed here that has not
        // reached the question yet takes it from its inbox at the next
        // renewal; the renewal may also have handed this very answer over
        // a moment ago — the same answer either way.
        match give(run) {
            Ok(()) | Err(Error::NotFound { .. } | Error::FailedPrecondition { .. }) => Ok(()),
            Err(e) => Err(e),
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
            Ok(run) => {
                // Cancelled here at once (its reason is the first one, even
                // if shutdown cancels the run a moment later), then, when
                // durable, recorded in its inbox: a replica that resumes the
                // run before its end is logged cancels it again.
                let running = run.snapshot().status == pb::RunStatus::Running;
                let status = run.cancel_by_request(reason);
                if let Some(durable) = &self.services().durable
                    && running
                    && run.epoch.load(std::sync::atomic::Ordering::Relaxed) > 0
                    && let Err(e) = durable.request_cancel(run_id, reason).await
                {
                    tracing::warn!(run_id, error = %e, "a cancel not recorded in the run store; the run stops here");
                }
                // Answered once the run has ended (its terminal event
                // logged), so a GetRun right after says so too; a run slow
                // to stop is answered CANCELLED all the same after a while.
                let until = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
                while run.snapshot().status == pb::RunStatus::Running
                    && !run.is_dropped()
                    && tokio::time::Instant::now() < until
                {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                return Ok(status);
            }
            Err(missing) => missing,
        };
        let there = self
            .on_peer(caller, run_id, missing, async |p, f| {
                p.cancel_run(f, run_id, reason).await
            })
            .await;
        match there {
            // A durable run elsewhere, or parked.
            Err(Error::NotFound { .. } | Error::Unavailable(_))
                if self.services().durable.is_some() && !caller.forward.forwarded =>
            {
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
        token: &str,
    ) -> Result<()> {
        let durable = self.stored_run_of(caller, run_id).await?;
        self.record_answer(durable, run_id, question, token).await
    }

    /// Records an answer in the inbox of durable run `run_id` (one script:
    /// exactly one answer per question is taken) and wakes the run if it
    /// is parked. `token` names the call: asked again, a call whose answer
    /// was taken is told OK.
    async fn record_answer(
        &self,
        durable: Arc<RedisRuns>,
        run_id: &str,
        question: Question<'_>,
        token: &str,
    ) -> Result<()> {
        let (id, field, what) = question.named();
        let id = id.to_owned();
        let refused = |message: String| Error::FailedPrecondition { field, message };
        match durable.answer(run_id, question, token).await? {
            Answered::Taken => Ok(()),
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
                    self.wake_later(durable, run_id);
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
                    self.wake_later(durable, run_id);
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
            .services()
            .durable
            .clone()
            .ok_or_else(|| not_found(run_id, ""))?;
        match durable.meta(run_id).await? {
            Some(meta) if meta.tenant == caller.tenant => Ok(durable),
            _ => Err(not_found(run_id, "")),
        }
    }

    /// Wakes a parked run in the background: the caller's answer is
    /// recorded already, and a call that goes away (a client deadline, a
    /// peer that stopped waiting) must not leave it half woken. Should this
    /// replica stop first, the run is claimable at once (the answer script
    /// made it so): any replica's next round of claims resumes it.
    fn wake_later(&self, durable: Arc<RedisRuns>, run_id: &str) {
        let core = self.clone();
        let run_id = run_id.to_owned();
        self.tasks
            .spawn(async move { core.wake(&durable, &run_id).await });
    }

    /// Claims a parked run and resumes it here — unless this replica is
    /// shutting down: the run is claimable, another replica resumes it.
    async fn wake(&self, durable: &RedisRuns, run_id: &str) {
        if self.shutdown.is_cancelled() {
            return;
        }
        let claimed_at = mono_ms();
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
                    claimed_at,
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
