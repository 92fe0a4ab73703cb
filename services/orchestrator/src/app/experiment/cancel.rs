//! Cancelling a running experiment (CancelExperiment). The replica
//! running it is told at once when it is this one, and through the store
//! otherwise (Redis: it looks every second); either way it stops as it
//! does when its caller leaves — no case starts, the runs still going are
//! cancelled, and the record keeps the cases that finished, CANCELLED.

use std::time::Duration;

use baton_proto::v1::{self as pb};

use crate::{
    app::orchestrator::{Caller, Orchestrator, audit},
    error::{Error, Result},
};

/// How long CancelExperiment waits for the record to say it ended.
const WAIT_FOR_END: Duration = Duration::from_secs(10);

impl Orchestrator {
    /// Stops the caller's running experiment `which` (id or name): its
    /// record, once it says it ended (or after [`WAIT_FOR_END`]).
    pub async fn cancel_experiment(&self, caller: &Caller, which: &str) -> Result<pb::Experiment> {
        let cancelled = self.cancel_experiment_anywhere(caller, which).await;
        audit("CancelExperiment", caller, "", "", &cancelled);
        cancelled
    }

    async fn cancel_experiment_anywhere(
        &self,
        caller: &Caller,
        which: &str,
    ) -> Result<pb::Experiment> {
        let record = self.get_experiment(caller, which).await?;
        if record.status != pb::ExperimentStatus::Running as i32 {
            let status = pb::ExperimentStatus::try_from(record.status)
                .map_or("ended", |s| s.as_str_name())
                .trim_start_matches("EXPERIMENT_STATUS_")
                .to_ascii_lowercase();
            return Err(Error::FailedPrecondition {
                field: "experiment",
                message: format!(
                    "{} is {status}: only a running experiment can be cancelled",
                    record.id
                ),
            });
        }
        let tenant = &caller.tenant;
        if !self.experiments_here.cancel(tenant, &record.id) {
            self.experiments.ask_cancel(tenant, &record.id).await?;
        }
        let until = tokio::time::Instant::now() + WAIT_FOR_END;
        loop {
            let now = self
                .experiments
                .get(tenant, &record.id)
                .await?
                .unwrap_or_else(|| record.clone());
            if now.status != pb::ExperimentStatus::Running as i32
                || tokio::time::Instant::now() >= until
            {
                return Ok(now);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
