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

/// Turns transparent huge pages off for this process (Linux; elsewhere a
/// no-op). The services allocate and free many small objects; with THP the
/// allocator's freed-and-reused memory comes back as 2 MiB pages the kernel
/// zeroes on first touch, which took a fifth of the pipeline benchmark's CPU
/// (fan-out of 1000: ~24 ms → ~19 ms per run without). Called first thing in
/// every binary's `main`. Best effort: where the kernel refuses (old
/// kernels, some sandboxes) the process runs as before, silently, since
/// nothing is wrong with it.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    let _ = rustix::thread::disable_transparent_huge_pages(true);
}
