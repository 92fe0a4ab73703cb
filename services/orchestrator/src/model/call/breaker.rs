//! Layer 3: a circuit breaker per provider entry (`providers.<name>`;
//! scripted models have none).
//!
//! Closed, it counts the provider's failures that another model may
//! answer (a 429, a 5xx, a timeout or a connection failure, after the
//! provider's own retries); `failures` of them within `window` open it.
//! Open, calls to the provider fail at once with `breaker_open` (the
//! fallback layer moves them on) for `cooldown`; then one call probes it:
//! answered (even with a 400), the breaker closes; failed, it opens again.
//! The state is this process's; `baton_model_breaker_open{provider}` shows
//! it.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::{CallSink, ModelCall, TryModel, moves};
use crate::catalog::models::BreakerSpec;
use crate::model::{Model, ModelError, ModelErrorKind, ModelTurn};

/// The `error_type` of a call refused by an open breaker.
pub const OPEN: &str = "breaker_open";

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

/// The breakers of every provider entry.
pub struct Breakers<I> {
    inner: I,
    specs: HashMap<String, BreakerSpec>,
    states: Mutex<HashMap<String, State>>,
    metrics: Arc<crate::metrics::Metrics>,
}

impl<I> Breakers<I> {
    /// Breakers of the providers in `specs` around `inner`.
    pub fn new(
        inner: I,
        specs: HashMap<String, BreakerSpec>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Self {
            inner,
            specs,
            states: Mutex::default(),
            metrics,
        }
    }

    fn with<R>(&self, provider: &str, f: impl FnOnce(&mut State) -> R) -> R {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        f(states.entry(provider.to_owned()).or_default())
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
        if let Pass::Refuse(wait) = self.pass(provider, Instant::now()) {
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
            .is_some_and(|why| why != "context_window");
        let open = self.outcome(provider, spec, failed, Instant::now());
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
