//! Redis's clock as seen from here: the offset learnt at every ping, so a
//! write can carry its deadline in Redis's clock and a script that starts
//! after it refuses to act.

use std::time::Duration;

use crate::slot::now_ms;

/// How far Redis's clock is from ours, learnt from `TIME` at every ping, so
/// a write can carry its deadline in Redis's clock.
#[derive(Default)]
pub(super) struct Clock {
    /// Redis's clock minus ours, minus the measurement's uncertainty (half
    /// the round trip), in ms: deadlines err on the early side.
    offset_ms: std::sync::atomic::AtomicI64,
}

impl Clock {
    /// Learns the offset from one `TIME`: sent at `sent_ms`, answered
    /// `redis_ms`, received at `received_ms` (our clock).
    pub(super) fn learn(&self, sent_ms: i64, redis_ms: i64, received_ms: i64) {
        let midpoint = (sent_ms + received_ms) / 2;
        let uncertainty = (received_ms - sent_ms + 1) / 2;
        self.offset_ms.store(
            redis_ms - midpoint - uncertainty,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The deadline, in Redis's clock, of a write sent now that the caller
    /// gives up on after `timeout`: a script that starts later refuses to
    /// act, so a write that answered `UNAVAILABLE` is never applied late.
    /// A margin (a tenth of the timeout, 5 to 250 ms) leaves time for the
    /// answer to travel back before the caller gives up.
    pub(super) fn deadline_ms(&self, timeout: Duration) -> i64 {
        let margin = (timeout / 10).clamp(Duration::from_millis(5), Duration::from_millis(250));
        let budget = timeout.saturating_sub(margin).as_millis() as i64;
        local_ms() + self.offset_ms.load(std::sync::atomic::Ordering::Relaxed) + budget
    }
}

/// Our clock, in Unix milliseconds.
pub(super) fn local_ms() -> i64 {
    now_ms() as i64
}
