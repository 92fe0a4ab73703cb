//! Turning SIGTERM and SIGINT into a cancellation every part of a service
//! listens to.

use tokio_util::sync::CancellationToken;

/// Returns a token that is cancelled on the first SIGTERM or SIGINT (Ctrl-C).
///
/// Services hand it to `run`, which drains: health goes `NOT_SERVING`, new
/// calls are refused, open streams end, then the server returns.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown signal received, draining");
        t.cancel();
    });
    token
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = tokio::signal::ctrl_c() => {},
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM, only Ctrl-C stops the service");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
