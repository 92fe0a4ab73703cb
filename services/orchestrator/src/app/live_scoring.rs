//! Live scoring: an agent whose entry in the agents file has `scoring`
//! (`sample` and `scorers`) has that share of its runs scored as they
//! complete — the same scorers as an experiment's (`crate::eval::score`),
//! judges and custom tools included — off the run's path: the run's end
//! is not held back. The scores are kept with the run (GetRun, ListRuns
//! with `failing_scores`, memory and Redis alike) and counted in
//! `baton_live_scores_total`.
//!
//! Which runs: an agent's own runs started by a caller (not a fork, a
//! replay or an experiment's case), in the sample by their id (the same on
//! every replica, so a run resumed elsewhere is scored there, by whichever
//! replica ends it). Only a completed run is scored (a failed one has no
//! answer to score; its failure shows already). A scorer that could not
//! say (its judge did not answer) is left out. At most
//! `app::orchestrator::LIVE_AT_ONCE` runs are scored at once on a replica: past that a
//! sampled run goes unscored. A judge's run is labelled `live-scoring`
//! (never scored itself, never resumed elsewhere) and forgotten once it
//! answered, so it keeps no copy of the person's words.

use std::{sync::Arc, time::Duration};

use baton_proto::v1 as pb;
use prost::Message as _;

use super::{
    experiment::scorers::{Asked, Subject},
    orchestrator::{Caller, Orchestrator},
};
use crate::{catalog::scoring::LiveScoring, run::record::RunRecord};

/// What a sampled run is scored with: its agent's scoring and its input.
pub(super) struct ToScore {
    scoring: LiveScoring,
    input: String,
}

/// The longest a watcher waits past a run's own deadline for its end (a
/// run parked or handed over ends elsewhere, or later).
const GRACE: Duration = Duration::from_secs(60);

impl Orchestrator {
    /// Whether run `record` (of request `request`, as the run store keeps
    /// it) is scored live, and with what.
    pub(super) fn to_score(&self, record: &RunRecord, request: &[u8]) -> Option<ToScore> {
        if record.kind != pb::RunKind::Agent
            || record.experiment.get().is_some()
            || record.forked_from.get().is_some()
            || record.replay_of.get().is_some()
        {
            return None;
        }
        let services = self.services();
        let scoring = services
            .catalog
            .agents
            .get(&record.target)?
            .spec
            .scoring
            .clone()?;
        if !scoring.samples(&record.run_id) {
            return None;
        }
        let input = pb::RunAgentRequest::decode(request).ok()?.input;
        Some(ToScore { scoring, input })
    }

    /// Scores run `record` once it completes (a task of this replica's,
    /// given up at its deadline and [`GRACE`], or when it moved to another
    /// replica or stopped here).
    pub(super) fn score_when_ended(&self, record: Arc<RunRecord>, what: ToScore) {
        let me = self.clone();
        self.tasks.spawn(async move {
            let limit = record.run_time_left() + GRACE;
            let ended = tokio::time::timeout(limit, async {
                loop {
                    let next = record.next_logged();
                    if record.snapshot().status != pb::RunStatus::Running {
                        return true;
                    }
                    if record.handed_over.load(std::sync::atomic::Ordering::SeqCst) {
                        return false;
                    }
                    tokio::select! {
                        () = next => {}
                        () = me.runs_stop.cancelled() => return false,
                        // A run that moved or parked logs nothing here.
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            })
            .await;
            if !matches!(ended, Ok(true)) {
                return;
            }
            let snapshot = record.snapshot();
            if snapshot.status != pb::RunStatus::Completed {
                return;
            }
            // At most LIVE_AT_ONCE runs are scored at once on a replica;
            // past that a run goes unscored (its sample is a share).
            let Ok(_permit) = me.live_scoring.clone().try_acquire_owned() else {
                tracing::debug!(run_id = %record.run_id, "live scoring is busy: a sampled run goes unscored");
                return;
            };
            me.score_live(&record, &what, &snapshot.output).await;
        });
    }

    /// Scores a completed live run's `output` and keeps the scores.
    async fn score_live(&self, record: &RunRecord, what: &ToScore, output: &str) {
        let caller = Caller {
            tenant: record.tenant.clone(),
            ..Default::default()
        };
        let messages = [what.input.clone()];
        let labels = std::collections::BTreeMap::new();
        let subject = Subject {
            experiment: None,
            case_id: &record.run_id,
            messages: &messages,
            expected: None,
            labels: &labels,
            budget: None,
        };
        let mut scores = Vec::new();
        for (k, scorer) in what.scoring.compiled.iter().enumerate() {
            let verdict = match scorer.score(output, None, None, &[]) {
                Some(v) => v,
                None => {
                    let asked = Asked {
                        output,
                        calls: &[],
                        run_id: &record.run_id,
                        call_id: format!("live-score-{k}"),
                    };
                    self.ask_scorer(&caller, &subject, scorer, &asked).await.0
                }
            };
            // A scorer that could not say (its judge did not answer) is
            // neither a pass nor a failure: not kept, not counted.
            if verdict.errored {
                tracing::warn!(run_id = %record.run_id, scorer = %verdict.scorer, reason = %verdict.reason, "a live scorer could not score a run");
                continue;
            }
            self.services()
                .metrics
                .live_score(&record.target, &verdict.scorer, verdict.passed);
            scores.push(pb::Score {
                scorer: verdict.scorer,
                score: verdict.score,
                passed: verdict.passed,
                reason: verdict.reason,
                agreement: verdict.agreement,
            });
        }
        if scores.is_empty() {
            return;
        }
        let encoded = pb::LiveScores {
            scores: scores.clone(),
        }
        .encode_to_vec();
        // The run store first, then this replica's record: whoever reads
        // them here (GetRun) finds them in the store too (ListRuns).
        if let Some(durable) = self.services().durable.clone()
            && let Err(e) = durable.set_scores(&record.run_id, &encoded).await
        {
            tracing::warn!(run_id = %record.run_id, error = %e, "a live run's scores could not be kept");
        }
        let _ = record.scores.set(scores);
        tracing::debug!(run_id = %record.run_id, "live run scored");
    }
}
