//! Stopping a run from outside its body: a client's CancelRun, shutdown,
//! or a failure the run did not raise itself (its history over its bound).
//! The first reason given wins; the run's body is dropped and `run::drive`
//! logs the one terminal event.

use baton_proto::v1 as pb;

use super::{
    failure::Failure,
    record::{RunRecord, lock},
};

impl RunRecord {
    /// Cancels the run at a client's request (CancelRun) with `reason`;
    /// the status after: `CANCELLED`, or the status the run already ended
    /// with.
    pub fn cancel_by_request(&self, reason: &str) -> pb::RunStatus {
        let status = self.snapshot().status;
        if status != pb::RunStatus::Running {
            return status;
        }
        self.cancel(&if reason.is_empty() {
            "cancelled by request".to_owned()
        } else {
            format!("cancelled by request: {reason}")
        });
        pb::RunStatus::Cancelled
    }

    /// Cancels the run (the first reason given wins).
    pub fn cancel(&self, reason: &str) {
        lock(&self.cancel_reason).get_or_insert_with(|| reason.to_owned());
        self.cancel.cancel();
        // Parked in memory: it wakes to end.
        self.wake();
    }

    /// Stops the run as failed with `failure` (unless it was cancelled or
    /// failed so before): its body is dropped as a cancelled one's is,
    /// and it ends `RunFailed` (see `run::drive`).
    pub fn fail(&self, failure: Failure) {
        {
            let mut reason = lock(&self.cancel_reason);
            if reason.is_some() {
                return;
            }
            *reason = Some(failure.message.clone());
            *lock(&self.failure) = Some(failure);
        }
        self.cancel.cancel();
        self.wake();
    }

    /// The failure the run was stopped with ([`Self::fail`]).
    pub fn failure(&self) -> Option<Failure> {
        lock(&self.failure).clone()
    }

    /// Why the run was cancelled.
    pub fn cancel_reason(&self) -> String {
        lock(&self.cancel_reason)
            .clone()
            .unwrap_or_else(|| "server shutting down".into())
    }
}
