//! The two clocks a run reads (a leaf): the wall clock, in milliseconds
//! since the Unix epoch (deadlines, times people and other replicas see),
//! and this process's monotonic clock (leases it holds).

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Milliseconds on this process's monotonic clock (from its first call):
/// a paused process (SIGSTOP) sees it jump by the pause when it goes on,
/// so a lease it held looks lapsed at once.
pub fn mono_ms() -> i64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as i64
}
