//! Shutdown: a replica that is stopping hands its durable runs over to the
//! others, and gives the runs it keeps (memory mode, or Redis not
//! answering) `shutdown_grace` to finish.

use super::orchestrator::Orchestrator;

impl Orchestrator {
    /// Once shutdown begins, lets running runs finish for up to `grace`,
    /// then cancels those still running ("server shutting down"); returns
    /// when every run has ended or been cancelled. New runs are refused from
    /// the first moment (health says `NOT_SERVING`).
    pub async fn finish_runs(&self, grace: std::time::Duration) {
        self.shutdown.cancelled().await;
        self.hand_over().await;
        let running = self.runs.running();
        if running > 0 {
            tracing::info!(
                running,
                grace_ms = grace.as_millis() as u64,
                "shutting down: running runs may finish within the grace period"
            );
        }
        let deadline = tokio::time::Instant::now() + grace;
        while self.runs.running() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        // A durable run resumed here since the drain began (a parked run
        // woken by an answer a moment before) goes over too, not cancelled.
        self.hand_over().await;
        let left = self.runs.running();
        if left > 0 {
            tracing::warn!(
                runs = left,
                "grace period over, cancelling the runs still running"
            );
        }
        self.runs_stop.cancel();
    }

    /// When runs are durable, hands every run of this replica over
    /// (drain): its lease is released (another replica claims and resumes
    /// it at once), it stops here without a terminal event, and its stream
    /// ends `UNAVAILABLE` so the client re-attaches. Runs that cannot be
    /// handed over (Redis not answering) get the grace period.
    async fn hand_over(&self) {
        let Some(durable) = &self.services().durable else {
            return;
        };
        for run in self.runs.running_runs() {
            let epoch = run.epoch.load(std::sync::atomic::Ordering::Relaxed);
            if epoch == 0 {
                continue;
            }
            match durable.release(&run.run_id, epoch).await {
                Ok(true) => {
                    self.runs.drop_run(&run, "handed over to another replica");
                    tracing::info!(run_id = %run.run_id, "handed a run over");
                }
                // Not ours any more (another replica claimed it while this
                // one was paused): nothing of it is this replica's to end.
                Ok(false) => {
                    self.runs
                        .drop_run(&run, "another replica owns this run now");
                    tracing::info!(run_id = %run.run_id, "another replica owns this run now; dropped it here");
                }
                Err(e) => {
                    tracing::warn!(run_id = %run.run_id, error = %e, "cannot hand a run over; it gets the grace period");
                }
            }
        }
    }
}
