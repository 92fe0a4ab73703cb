//! What a run's events owe to others besides its callers: deliveries to
//! its webhooks (made by `crate::webhook`, which implements [`Hooks`]).
//! The sequencers ask a run's hooks for each event's deliveries and queue
//! them: in memory, or in a durable run's append (the run's own script,
//! after the streams were marked due).

use futures::future::BoxFuture;

use super::log::Logged;
use crate::error::Error;

/// One delivery to queue: its stream and its record.
#[derive(Debug, Clone)]
pub struct Queued {
    /// `{run_id}/{sub}`.
    pub stream: String,
    /// The delivery, as the outbox keeps it.
    pub raw: String,
}

/// A run's webhooks, as its sequencer sees them.
pub trait Hooks: Send + Sync {
    /// The deliveries `logged` makes (none for most events).
    fn deliveries(&self, logged: &Logged) -> Vec<Queued>;
    /// Queues deliveries (memory mode) and wakes the worker.
    fn queue(&self, queued: Vec<Queued>) -> BoxFuture<'_, ()>;
    /// Durable runs: marks the streams due before their deliveries are
    /// written with the events (so none is stranded).
    fn mark_due<'a>(&'a self, streams: &'a [String]) -> BoxFuture<'a, Result<(), Error>>;
    /// Durable runs: the key of a stream's list (under the run's hash
    /// tag) and how long it is kept after a push.
    fn queue_key(&self, stream: &str) -> (String, u64);
    /// Durable runs: deliveries were written; the worker may take them.
    fn written(&self);
    /// Itself, for its maker to reach its own type.
    fn as_any(&self) -> &dyn std::any::Any;
}
