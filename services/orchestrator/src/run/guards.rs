//! What counts a run's frames and tool calls as alive.

use std::sync::{Arc, atomic::Ordering};

use super::record::RunRecord;

/// Counts a frame or tool call as alive while it exists.
pub struct LiveGuard(Arc<RunRecord>);

impl LiveGuard {
    /// Counts one more live task of `record`.
    pub fn new(record: &Arc<RunRecord>) -> Self {
        record.live_tasks.fetch_add(1, Ordering::SeqCst);
        Self(record.clone())
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live_tasks.fetch_sub(1, Ordering::SeqCst);
    }
}
