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
//! Baton's own refusals below it — a rate limit's queue that timed out
//! (`rate_limit`), shared counters that did not answer
//! (`limit_unreachable`) — say nothing of the provider: they neither count
//! as failures nor close the breaker.
//!
//! A probe is a guard: a probing call dropped before it ends (cancelled,
//! its caller gone, a timeout, fencing) gives the probe back, so the next
//! call probes instead of the breaker staying open for good.
//!
//! With durable runs the breaker is shared by every replica through Redis
//! ([`SharedBreakers`], see `shared_state::breakers`): each counted failure
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
    /// This replica's probe of `provider` ended without telling anything
    /// (dropped, or refused by Baton itself): another may probe at once.
    async fn abandon_probe(&self, provider: &str) -> Result<(), String>;
}

/// What a call told of its provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The provider answered (a 400 is an answer).
    Answered,
    /// It failed in a way that counts (a 429, a 5xx, a timeout).
    Failed,
    /// Baton refused the call before it reached the provider.
    Neutral,
}

/// Baton's own refusals below the breaker (see `limit`).
fn outcome_of(answered: &Result<ModelTurn, ModelError>) -> Outcome {
    let Err(e) = answered else {
        return Outcome::Answered;
    };
    if super::limit::refused_here(e) {
        return Outcome::Neutral;
    }
    match moves(e) {
        Some(why) if why != "context_window" && why != "breaker_open" => Outcome::Failed,
        _ => Outcome::Answered,
    }
}

/// A probe in flight: given back when dropped before its outcome counted.
struct Probing<'a, I> {
    breakers: &'a Breakers<I>,
    provider: &'a str,
    live: bool,
}

impl<I> Probing<'_, I> {
    /// The probe's outcome counted: nothing to give back.
    fn done(mut self) {
        self.live = false;
    }
}

impl<I> Drop for Probing<'_, I> {
    fn drop(&mut self) {
        if self.live {
            self.breakers.give_back_probe(self.provider);
        }
    }
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

    /// A probe of `provider` ended without an outcome: the next call
    /// probes (here, and on any replica).
    fn give_back_probe(&self, provider: &str) {
        self.with(provider, |s| s.probing = false);
        self.metrics.breaker_probing(provider, false);
        if let Some(shared) = &self.shared
            && let Ok(handle) = tokio::runtime::Handle::try_current()
        {
            let (shared, provider) = (shared.clone(), provider.to_owned());
            handle.spawn(async move {
                if let Err(e) = shared.abandon_probe(&provider).await {
                    // It lapses by itself after the model timeout.
                    tracing::warn!(provider, error = %e, "a breaker's probe was not given back");
                }
            });
        }
    }

    /// Whether `provider` is being probed here (tests, the invariants'
    /// checks).
    pub fn probing(&self, provider: &str) -> bool {
        self.with(provider, |s| s.probing)
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
        let mut probing = None;
        if pass == Pass::Probe {
            // From here the probe is given back however the call ends.
            let probe = Probing {
                breakers: self,
                provider,
                live: true,
            };
            // One replica of all probes.
            let mine = match &self.shared {
                Some(shared) => shared.probe(provider, call.timeout).await.unwrap_or(false),
                None => true,
            };
            if mine {
                self.metrics.breaker_probing(provider, true);
                probing = Some(probe);
            } else {
                self.with(provider, |s| s.probing = false);
                probe.done();
                pass = Pass::Refuse(Duration::ZERO);
            }
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
        let outcome = outcome_of(&answered);
        if outcome == Outcome::Neutral {
            // Nothing learnt of the provider; a probe is given back as the
            // guard drops.
            return answered;
        }
        if let Some(p) = probing {
            p.done();
            self.metrics.breaker_probing(provider, false);
        }
        let failed = outcome == Outcome::Failed;
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

    /// A provider that answers as told: hangs, fails, or is refused by
    /// Baton's own rate limit.
    struct Scripted(std::sync::Mutex<Vec<&'static str>>);

    #[async_trait::async_trait]
    impl TryModel for Scripted {
        async fn try_model(
            &self,
            _: &Arc<dyn Model>,
            _: &ModelCall<'_>,
            _: &dyn CallSink,
        ) -> Result<ModelTurn, ModelError> {
            let next = self.0.lock().expect("script").remove(0);
            let fail = |kind, error_type: &str| Err(ModelError::new("p:m", kind, error_type, "x"));
            match next {
                "hang" => std::future::pending().await,
                "500" => fail(ModelErrorKind::Unavailable, "500"),
                "limited" => fail(ModelErrorKind::RateLimited, super::super::limit::LIMITED),
                "unreachable" => fail(
                    ModelErrorKind::Unavailable,
                    super::super::limit::UNREACHABLE,
                ),
                _ => Ok(ModelTurn::default()),
            }
        }
    }

    struct Named;

    #[async_trait::async_trait]
    impl Model for Named {
        fn reference(&self) -> &str {
            "p:m"
        }
        async fn turn(
            &self,
            _: crate::model::ModelRequest<'_>,
            _: &dyn crate::model::DeltaSink,
        ) -> Result<ModelTurn, ModelError> {
            Ok(ModelTurn::default())
        }
    }

    struct Quiet;

    #[async_trait::async_trait]
    impl crate::model::DeltaSink for Quiet {
        async fn delta(&self, _: String) {}
    }

    #[async_trait::async_trait]
    impl CallSink for Quiet {
        async fn fell_back(&self, _: &str, _: &str, _: &super::super::request::Skipped, _: bool) {}
        async fn waiting(&self, _: &str, _: &str, _: Duration, _: usize) {}
    }

    #[tokio::test]
    async fn a_dropped_probe_is_given_back_and_batons_own_refusals_count_for_nothing() {
        let spec = BreakerSpec {
            failures: 2,
            window: Duration::from_secs(10),
            cooldown: Duration::from_millis(50),
        };
        let script = vec![
            "limited",
            "unreachable",
            "limited",
            "500",
            "500",
            "hang",
            "ok",
        ];
        let b = Breakers::new(
            Scripted(std::sync::Mutex::new(script)),
            [("p".to_owned(), spec)].into_iter().collect(),
            Arc::default(),
        );
        let model: Arc<dyn Model> = Arc::new(Named);
        let fixture = crate::model::call::request::TestCall::default();
        let models = [model.clone()];
        let call = fixture.call(&models, &[], "t", Duration::from_secs(5));
        // Three of Baton's own refusals: the breaker stays closed.
        for _ in 0..3 {
            assert!(b.try_model(&model, &call, &Quiet).await.is_err());
        }
        assert_eq!(b.pass("p", Instant::now()), Pass::Call);
        // Two failures of the provider open it.
        for _ in 0..2 {
            assert!(b.try_model(&model, &call, &Quiet).await.is_err());
        }
        assert!(matches!(b.pass("p", Instant::now()), Pass::Refuse(_)));
        tokio::time::sleep(Duration::from_millis(60)).await;
        // The probe hangs and its caller gives up: the probe is given back.
        let probe = b.try_model(&model, &call, &Quiet);
        assert!(
            tokio::time::timeout(Duration::from_millis(20), probe)
                .await
                .is_err()
        );
        assert!(!b.probing("p"));
        // The next call probes, is answered, and closes it.
        assert!(b.try_model(&model, &call, &Quiet).await.is_ok());
        assert_eq!(b.pass("p", Instant::now()), Pass::Call);
    }
}
