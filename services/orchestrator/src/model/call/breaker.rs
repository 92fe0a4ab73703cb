//! Layer 3: a circuit breaker per provider entry (`providers.<name>`;
//! scripted models have none).
//!
//! Closed, it counts the provider's failures that another model may
//! answer (a 429, a 5xx, a timeout or a connection failure, after the
//! provider's own retries); `failures` of them within `window` open it.
//! Open, calls to the provider fail at once with `breaker_open` (the
//! fallback layer moves them on) for `cooldown`; then one call probes it:
//! answered (even with a 400), the breaker closes; failed, it opens again.
//! `baton_model_breaker_open{provider}` shows it.
//!
//! With durable runs the breaker is shared by every replica through Redis
//! ([`SharedBreakers`], see `run::durable::breakers`): each counted failure
//! is counted for all of them (the failure path only: a call that answers
//! costs no round trip unless the breaker had failures), a breaker opened
//! by one replica is seen by the others within a second (each reads the
//! open breakers once a second), and after the cool-down one replica of
//! all probes.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::request::{CallSink, ModelCall, TryModel, moves};
use crate::catalog::models::BreakerSpec;
use crate::model::{Model, ModelError, ModelErrorKind, ModelTurn};

pub use super::request::OPEN;

#[derive(Default)]
struct State {
    failures: VecDeque<Instant>,
    open_until: Option<Instant>,
    probing: bool,
}

/// What the breaker lets through.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// Closed.
    Call,
    /// Open past its cool-down: this call probes.
    Probe,
    /// Open: next probe after this long.
    Refuse(Duration),
}

/// Breaker state every replica shares (Redis, with durable runs).
#[async_trait::async_trait]
pub trait SharedBreakers: Send + Sync {
    /// Counts a failure of `provider` for every replica (a failed probe
    /// opens it again at once); how long the breaker is open for now
    /// (`None`: closed).
    async fn failed(
        &self,
        provider: &str,
        spec: &BreakerSpec,
        probe: bool,
    ) -> Result<Option<Duration>, String>;
    /// `provider` answered: closed for every replica.
    async fn answered(&self, provider: &str) -> Result<(), String>;
    /// How long each of `providers`' breakers is open for (`None`: closed).
    async fn open(&self, providers: &[String]) -> Result<Vec<Option<Duration>>, String>;
    /// Whether this replica may probe `provider` (one replica at a time,
    /// for at most `hold`).
    async fn probe(&self, provider: &str, hold: Duration) -> Result<bool, String>;
}

type States = Mutex<HashMap<String, State>>;

/// The breakers of every provider entry.
pub struct Breakers<I> {
    inner: I,
    specs: HashMap<String, BreakerSpec>,
    states: Arc<States>,
    metrics: Arc<crate::metrics::Metrics>,
    shared: Option<Arc<dyn SharedBreakers>>,
}

impl<I> Breakers<I> {
    /// Breakers of the providers in `specs` around `inner`, this process's
    /// own.
    pub fn new(
        inner: I,
        specs: HashMap<String, BreakerSpec>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Self {
            inner,
            specs,
            states: Arc::default(),
            metrics,
            shared: None,
        }
    }

    /// These breakers shared through `shared`: the breakers other replicas
    /// opened are read once a second (while these breakers live).
    pub fn shared(mut self, shared: Arc<dyn SharedBreakers>) -> Self {
        let providers: Vec<String> = self.specs.keys().cloned().collect();
        if !providers.is_empty() && tokio::runtime::Handle::try_current().is_ok() {
            let states = Arc::downgrade(&self.states);
            let (from, metrics) = (shared.clone(), self.metrics.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let Some(states) = states.upgrade() else {
                        return;
                    };
                    let Ok(open) = from.open(&providers).await else {
                        continue;
                    };
                    let now = Instant::now();
                    let mut states = states.lock().unwrap_or_else(|p| p.into_inner());
                    for (provider, open) in providers.iter().zip(open) {
                        let Some(open) = open else { continue };
                        let s = states.entry(provider.clone()).or_default();
                        if !s.probing && s.open_until.is_none_or(|u| u < now + open) {
                            s.open_until = Some(now + open);
                            metrics.breaker(provider, true);
                        }
                    }
                }
            });
        }
        self.shared = Some(shared);
        self
    }

    fn with<R>(&self, provider: &str, f: impl FnOnce(&mut State) -> R) -> R {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        f(states.entry(provider.to_owned()).or_default())
    }

    /// Whether `provider`'s breaker has counted anything since it last
    /// closed.
    fn dirty(&self, provider: &str) -> bool {
        self.with(provider, |s| {
            !s.failures.is_empty() || s.open_until.is_some() || s.probing
        })
    }

    fn pass(&self, provider: &str, now: Instant) -> Pass {
        self.with(provider, |s| match s.open_until {
            None => Pass::Call,
            Some(until) if now < until => Pass::Refuse(until - now),
            Some(_) if s.probing => Pass::Refuse(Duration::ZERO),
            Some(_) => {
                s.probing = true;
                Pass::Probe
            }
        })
    }

    /// Counts an outcome; whether the breaker is open after it.
    fn outcome(&self, provider: &str, spec: &BreakerSpec, failed: bool, now: Instant) -> bool {
        self.with(provider, |s| {
            if !failed {
                *s = State::default();
                return false;
            }
            if s.probing {
                s.probing = false;
                s.open_until = Some(now + spec.cooldown);
                return true;
            }
            s.failures.push_back(now);
            while s
                .failures
                .front()
                .is_some_and(|t| now.duration_since(*t) > spec.window)
            {
                s.failures.pop_front();
            }
            if s.failures.len() >= spec.failures as usize {
                s.failures.clear();
                s.open_until = Some(now + spec.cooldown);
            }
            s.open_until.is_some()
        })
    }
}

#[async_trait::async_trait]
impl<I: TryModel> TryModel for Breakers<I> {
    async fn try_model(
        &self,
        model: &Arc<dyn Model>,
        call: &ModelCall<'_>,
        sink: &dyn CallSink,
    ) -> Result<ModelTurn, ModelError> {
        // The provider entry: the reference's `provider` part.
        let reference = model.reference();
        let provider = reference.split_once(':').map_or(reference, |(p, _)| p);
        let Some(spec) = self.specs.get(provider) else {
            return self.inner.try_model(model, call, sink).await;
        };
        let mut pass = self.pass(provider, Instant::now());
        // One replica of all probes.
        if let (Pass::Probe, Some(shared)) = (&pass, &self.shared)
            && !shared.probe(provider, call.timeout).await.unwrap_or(false)
        {
            self.with(provider, |s| s.probing = false);
            pass = Pass::Refuse(Duration::ZERO);
        }
        if let Pass::Refuse(wait) = pass {
            return Err(ModelError::new(
                model.reference(),
                ModelErrorKind::Unavailable,
                OPEN,
                format!(
                    "provider {provider:?}'s circuit breaker is open after {} failures within {:?}; next probe in {:.1}s",
                    spec.failures,
                    spec.window,
                    wait.as_secs_f64()
                ),
            ));
        }
        let answered = self.inner.try_model(model, call, sink).await;
        let failed = answered
            .as_ref()
            .err()
            .and_then(moves)
            .is_some_and(|why| why != "context_window" && why != "breaker_open");
        let dirty = self.dirty(provider);
        let mut open = self.outcome(provider, spec, failed, Instant::now());
        if let Some(shared) = &self.shared {
            if failed {
                // Counted for every replica: it may open here by others'.
                let probed = pass == Pass::Probe;
                if let Ok(Some(for_)) = shared.failed(provider, spec, probed).await {
                    let until = Instant::now() + for_;
                    self.with(provider, |s| {
                        if s.open_until.is_none_or(|u| u < until) {
                            s.open_until = Some(until);
                        }
                    });
                    open = true;
                }
            } else if dirty && let Err(e) = shared.answered(provider).await {
                tracing::warn!(provider, error = %e, "the shared breaker was not closed");
            }
        }
        self.metrics.breaker(provider, open);
        answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_failures_in_the_window_then_probes_once() {
        let spec = BreakerSpec {
            failures: 3,
            window: Duration::from_secs(10),
            cooldown: Duration::from_secs(5),
        };
        let b = Breakers::new((), HashMap::new(), Arc::default());
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Two failures, then one outside the window: still closed.
        assert!(!b.outcome("p", &spec, true, at(0)));
        assert!(!b.outcome("p", &spec, true, at(1)));
        assert!(!b.outcome("p", &spec, true, at(12)));
        // A success resets the count.
        assert!(!b.outcome("p", &spec, false, at(13)));
        assert!(!b.outcome("p", &spec, true, at(14)));
        assert!(!b.outcome("p", &spec, true, at(15)));
        assert_eq!(b.pass("p", at(15)), Pass::Call);
        // The third within 10s opens it for 5s.
        assert!(b.outcome("p", &spec, true, at(16)));
        assert_eq!(b.pass("p", at(18)), Pass::Refuse(Duration::from_secs(3)));
        // After the cool-down one call probes; the others still wait.
        assert_eq!(b.pass("p", at(21)), Pass::Probe);
        assert_eq!(b.pass("p", at(21)), Pass::Refuse(Duration::ZERO));
        // The probe fails: open again for a cool-down.
        assert!(b.outcome("p", &spec, true, at(22)));
        assert_eq!(b.pass("p", at(26)), Pass::Refuse(Duration::from_secs(1)));
        assert_eq!(b.pass("p", at(27)), Pass::Probe);
        // The probe is answered: closed.
        assert!(!b.outcome("p", &spec, false, at(28)));
        assert_eq!(b.pass("p", at(28)), Pass::Call);
        // Another provider's breaker is its own.
        assert_eq!(b.pass("q", at(18)), Pass::Call);
    }
}
