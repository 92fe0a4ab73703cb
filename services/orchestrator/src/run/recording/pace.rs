//! Pacing a walk through recorded points (a leaf).
//!
//! A resumed run and a fork take what was done before from their journal:
//! a model turn, a tool result, an answer. Nothing there waits,
//! so without a pause the whole walk would be one poll of the run's task,
//! holding a worker of the runtime for all of it: a fork of a 10,000-turn
//! run walks for tens of milliseconds. Whatever is queued on that worker
//! waits as long, and so does the I/O driver when the other workers sleep
//! (Tokio polls it from a worker that parks): on the 100-turn fork
//! benchmark the fork's own replayed events sat in the socket until its
//! walk had ended, about 0.3 ms of its 1.5 ms.
//!
//! [`Pacer::pace`] lets the worker go (`yield_now`: the worker polls the
//! driver and runs what is queued, then the walk goes on) once every
//! [`SLICE`] of walking: a few syscalls per millisecond of walk, and no
//! task or socket waits longer than a slice behind it.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// The longest a walk goes on without letting its worker go.
pub const SLICE: Duration = Duration::from_micros(50);

/// When a run's walk last let its worker go.
#[derive(Debug)]
pub struct Pacer {
    start: Instant,
    /// Nanoseconds after `start` of the last pause.
    last: AtomicU64,
}

impl Default for Pacer {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Pacer {
    /// Called at each recorded point taken: yields to the runtime when
    /// [`SLICE`] has passed since the last pause (or since the pacer was
    /// made), at once otherwise. Branches of a run share one pacer; a
    /// pause any of them takes counts for all.
    pub async fn pace(&self) {
        if self.due(Instant::now()) {
            tokio::task::yield_now().await;
        }
    }

    /// Whether a pause is due at `now`, and if so, that it is taken now.
    fn due(&self, now: Instant) -> bool {
        let now =
            u64::try_from(now.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX);
        let last = self.last.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SLICE.as_nanos() as u64 {
            return false;
        }
        self.last.store(now, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::task::{Context, Poll};

    use super::*;

    #[test]
    fn a_pause_is_due_once_per_slice() {
        let pacer = Pacer::default();
        let t0 = pacer.start;
        // Within the first slice: none.
        assert!(!pacer.due(t0));
        assert!(!pacer.due(t0 + SLICE - Duration::from_nanos(1)));
        // At the slice: one, and the next slice counts from it.
        assert!(pacer.due(t0 + SLICE));
        assert!(!pacer.due(t0 + SLICE + SLICE / 2));
        assert!(pacer.due(t0 + SLICE * 2));
        // A long gap: one pause, not one per slice missed.
        assert!(pacer.due(t0 + SLICE * 10));
        assert!(!pacer.due(t0 + SLICE * 10 + Duration::from_micros(1)));
    }

    #[tokio::test]
    async fn pace_yields_only_when_a_pause_is_due() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Not due (its slice has not begun): it goes on at once.
        let fresh = Pacer {
            start: Instant::now() + Duration::from_secs(3600),
            last: AtomicU64::new(0),
        };
        assert!(pin!(fresh.pace()).poll(&mut cx).is_ready());
        // Due: it lets the worker go (its first poll is pending), then
        // goes on.
        let pacer = Pacer::default();
        std::thread::sleep(SLICE);
        let mut paced = pin!(pacer.pace());
        assert_eq!(paced.as_mut().poll(&mut cx), Poll::Pending);
        paced.await;
    }
}
