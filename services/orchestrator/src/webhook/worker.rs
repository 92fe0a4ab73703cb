//! The worker of a replica: takes due streams, makes each stream's
//! deliveries in order (one try each), and settles them: delivered, tried
//! again after a backoff (doubling from `retry_initial` up to
//! `retry_max`, with jitter, or the receiver's `Retry-After`), or dead
//! once `retry_for` has passed since the delivery was made.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tokio_util::sync::CancellationToken;

use super::hosts::redacted;
use crate::shared_state::clock_now_ms as now_ms;

use super::{
    Webhooks,
    delivery::{Auth, Delivery},
    outbox::{Claim, Dead},
    send::{Tried, attempt},
};

/// Guards one in-flight stream: counted while it lives.
struct InFlight(Arc<Webhooks>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.0.wake.notify_one();
    }
}

/// How long to wait before try `n + 1` after `n` failed ones: doubling
/// from `initial`, at most `max`, the upper half jittered.
pub fn backoff(n: u32, initial: Duration, max: Duration) -> Duration {
    let base = initial
        .saturating_mul(1u32 << n.saturating_sub(1).min(20))
        .min(max);
    let half = base / 2;
    let jitter = (uuid::Uuid::new_v4().as_u128() as u64) % (half.as_millis() as u64 + 1);
    half + Duration::from_millis(jitter)
}

impl Webhooks {
    /// Runs the worker until `stop` (a drain): what it holds then is let
    /// go, or lapses with its lease.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let tasks = tokio_util::task::TaskTracker::new();
        let mut last_refresh = std::time::Instant::now();
        loop {
            if last_refresh.elapsed() >= self.config.poll {
                last_refresh = std::time::Instant::now();
                if let Err(e) = self.tenants.refresh().await {
                    tracing::debug!(error = %e, "tenants' webhooks could not be read again");
                }
            }
            let room = self
                .config
                .concurrency
                .saturating_sub(self.in_flight.load(Ordering::SeqCst));
            let claims = if room == 0 {
                Vec::new()
            } else {
                match self.outbox.claim(room).await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "webhook streams could not be claimed");
                        Vec::new()
                    }
                }
            };
            let full = claims.len() == room && room > 0;
            for claim in claims {
                self.in_flight.fetch_add(1, Ordering::SeqCst);
                let guard = InFlight(self.clone());
                let me = self.clone();
                let stop = stop.clone();
                tasks.spawn(async move {
                    let stopped = tokio::select! {
                        _ = me.drive(&claim) => false,
                        _ = stop.cancelled() => true,
                    };
                    // Stopped mid-stream: let it go now (in Redis another
                    // replica takes it at once, not once the lease lapses).
                    if stopped {
                        let _ = me.outbox.release(&claim).await;
                    }
                    drop(guard);
                });
            }
            if full {
                continue;
            }
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(self.config.poll) => {}
            }
        }
        tasks.close();
        tasks.wait().await;
    }

    /// Makes a held stream's deliveries in order until it is empty, a try
    /// fails (it waits for its retry), or the lease is lost.
    async fn drive(&self, claim: &Claim) {
        loop {
            let head = match self.outbox.head(claim).await {
                Ok(Some(h)) => h,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(stream = %claim.stream, error = %e, "a webhook stream was let go");
                    return;
                }
            };
            let mut d = head.delivery;
            // Waiting out a backoff (the stream was marked due again by a
            // newer event): due again when the wait ends, untried.
            let wait_left = d.not_before_ms - now_ms();
            if wait_left > 0 {
                let _ = self.outbox.defer(claim, wait_left as u64).await;
                return;
            }
            let secrets = match &d.auth {
                Auth::Own { secret } => super::sign::Secret::parse(secret).into_iter().collect(),
                Auth::Tenant => {
                    let mut found = self.tenants.find(&d.tenant, &d.webhook_id);
                    if found.is_none() {
                        // Made on another replica since this one last read
                        // them? Read again before calling it deleted (and
                        // when they cannot be read, leave it to the lease).
                        if self.tenants.refresh().await.is_err() {
                            return;
                        }
                        found = self.tenants.find(&d.tenant, &d.webhook_id);
                    }
                    match found {
                        Some(s) => {
                            d.url.clone_from(&s.url);
                            s.secrets(now_ms())
                        }
                        None => {
                            // Deleted: nothing more is delivered to it.
                            let _ = self.outbox.pop(claim, &head.raw).await;
                            continue;
                        }
                    }
                }
                Auth::Header { .. } => {
                    if self.removed_here_or_there(&d).await {
                        let _ = self.outbox.pop(claim, &head.raw).await;
                        continue;
                    }
                    Vec::new()
                }
            };
            let tried = match self.policy.check_url(&d.url) {
                Ok(_) => {
                    self.stats.attempts.fetch_add(1, Ordering::Relaxed);
                    attempt(&self.client, &d, &secrets, self.config.max_response_bytes).await
                }
                Err(e) => Tried::Failed {
                    error: format!("url {e}"),
                    retry_after: None,
                },
            };
            d.attempts += 1;
            match tried {
                Tried::Delivered => {
                    self.stats.delivered.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(id = %d.id, run_id = %d.run_id, kind = %d.kind, attempts = d.attempts, "webhook delivered");
                    match self.outbox.pop(claim, &head.raw).await {
                        Ok(true) => continue,
                        _ => return,
                    }
                }
                Tried::Failed { error, retry_after } => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    d.last_error = error;
                    // A Retry-After is waited (at least a second: `0` is no
                    // licence to hammer), never past `retry_for`.
                    let wait = retry_after
                        .map(|r| r.max(Duration::from_secs(1)))
                        .unwrap_or_else(|| {
                            backoff(d.attempts, self.config.retry_initial, self.config.retry_max)
                        })
                        .min(self.config.retry_for);
                    let deadline = d
                        .created_ms
                        .saturating_add(self.config.retry_for.as_millis() as i64);
                    let next = now_ms().saturating_add(wait.as_millis() as i64);
                    if next >= deadline {
                        if self.give_up(claim, &head.raw, d).await {
                            continue;
                        }
                        return;
                    }
                    d.not_before_ms = next;
                    tracing::info!(id = %d.id, run_id = %d.run_id, url = %redacted(&d.url), attempts = d.attempts, error = %d.last_error, retry_in_ms = wait.as_millis() as u64, "webhook try failed");
                    if let Err(e) = self
                        .outbox
                        .retry(claim, &head.raw, &d, wait.as_millis() as u64)
                        .await
                    {
                        tracing::debug!(error = %e, "a webhook retry could not be recorded");
                    }
                    return;
                }
            }
        }
        if let Err(e) = self.outbox.release(claim).await {
            tracing::debug!(stream = %claim.stream, error = %e, "a webhook stream could not be let go (its lease lapses)");
        }
    }

    /// Whether an A2A config's deliveries were stopped (its config deleted,
    /// here or on another replica).
    async fn removed_here_or_there(&self, d: &Delivery) -> bool {
        let stream = d.stream();
        match &self.outbox {
            // Redis's set is the one every replica writes (a config made
            // again takes its stream out of it).
            super::outbox::Outbox::Redis(r) => r.is_stopped(&stream).await.unwrap_or(false),
            super::outbox::Outbox::Memory(_) => self
                .removed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&stream),
        }
    }

    /// Moves a delivery that kept failing to its tenant's dead letters
    /// (kept first, then taken off its stream: a replica killed between
    /// the two leaves it in both, never in neither); false when it could
    /// not be kept (the stream is left to its lease).
    async fn give_up(&self, claim: &Claim, raw: &str, d: Delivery) -> bool {
        self.stats.dead.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(id = %d.id, run_id = %d.run_id, url = %redacted(&d.url), attempts = d.attempts, error = %d.last_error, "webhook delivery given up: in the tenant's dead letters");
        let dead = Dead {
            delivery: d,
            dead_ms: now_ms(),
        };
        if let Err(e) = self.outbox.bury(&dead, self.config.max_dead_letters).await {
            tracing::warn!(error = %e, "a dead letter could not be kept");
            return false;
        }
        matches!(self.outbox.pop(claim, raw).await, Ok(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_max() {
        let (i, m) = (Duration::from_secs(5), Duration::from_secs(60));
        for _ in 0..50 {
            let b1 = backoff(1, i, m);
            assert!(b1 >= Duration::from_millis(2500) && b1 <= i, "{b1:?}");
            let b3 = backoff(3, i, m);
            assert!(
                b3 >= Duration::from_secs(10) && b3 <= Duration::from_secs(20),
                "{b3:?}"
            );
            let b30 = backoff(30, i, m);
            assert!(b30 >= Duration::from_secs(30) && b30 <= m, "{b30:?}");
        }
        assert_eq!(
            redacted("https://h.example.com:8443/p?token=x"),
            "https://h.example.com:8443/p"
        );
    }
}
