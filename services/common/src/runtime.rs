//! Building the Tokio runtime a service runs on, from its config.

/// Builds a runtime with `worker_threads` workers: `1` is a current-thread
/// runtime (everything on the thread that calls `block_on`), `0` is one
/// worker per core, any other number that many workers.
///
/// On small machines a current-thread runtime avoids a cross-thread wake-up
/// per message, which costs more than the work of a context-store call; the
/// store defaults to it (see its README for the measurement).
pub fn build(worker_threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    match worker_threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        0 => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
}
