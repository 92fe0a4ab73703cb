//! Layer 3b: provider rate limits (`providers.<name>.rate_limit`), one
//! limit for every replica.
//!
//! A limit is a sliding window: at most `requests` calls and `tokens`
//! tokens within any `window` (a minute by default), counted at the moment
//! each call is let through. A call counts its input estimate and its
//! `max_tokens` (the budget layer's cap when there is one; else its
//! model's output limit, at most what the limit holds) until it is settled
//! to the tokens it used. The window lives in Redis when runs are
//! durable (every replica counts in one place; a replica leases permits a
//! batch at a time, so a busy one asks Redis once per batch, not per call:
//! see `shared_state::limits`), else in this process ([`MemoryWindows`]).
//!
//! A call over the limit **waits**, in a queue fair across tenants: the
//! waiting calls of one limit are let through one tenant after another
//! (round robin), so one tenant's burst does not starve another's steady
//! calls. A call waits at most the model timeout, then fails as rate
//! limited (and moves to a fallback model, if any). The wait is an event
//! ([`CallSink::waiting`]) and the metrics
//! `baton_rate_limit_queue{provider}` and
//! `baton_rate_limit_wait_seconds{provider}`.
//!
//! When the shared counters do not answer (Redis down) the call fails
//! `UNAVAILABLE` (`limit_unreachable`), unless the limit says `fail_open`.

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

use super::request::{CallSink, ModelCall, TryModel};
use crate::catalog::models::RateLimitSpec;
use crate::model::{Model, ModelError, ModelErrorKind, ModelTurn};

/// The `error_type` of a call that waited the model timeout in a rate
/// limit's queue (or counts more tokens than the limit holds).
pub const LIMITED: &str = "rate_limit";
/// The `error_type` of a call whose limit's shared counters did not answer.
pub const UNREACHABLE: &str = "limit_unreachable";

/// Whether `e` is Baton's own refusal of a call, which never reached the
/// provider (the breaker does not count it).
pub fn refused_here(e: &ModelError) -> bool {
    e.error_type == LIMITED || e.error_type == UNREACHABLE
}

/// What one call takes from a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// Most calls within the window (`None`: no bound).
    pub requests: Option<u64>,
    /// Most tokens within the window (`None`: no bound).
    pub tokens: Option<u64>,
    /// The window.
    pub window: Duration,
    /// The tokens this call counts.
    pub cost: u64,
}

/// Where windows are counted.
#[async_trait::async_trait]
pub trait Window: Send + Sync {
    /// Counts call `id` in `key`'s window when it fits; else how long until
    /// it may. `Err`: the counters did not answer.
    async fn take(&self, key: &str, id: &str, want: &Want) -> Result<Option<Duration>, String>;

    /// Call `id`, which counted `counted` tokens, used `used`.
    async fn settle(&self, key: &str, id: &str, counted: u64, used: u64);
}

/// The calls one window holds: when each was let through, its id, its
/// tokens.
type Log = VecDeque<(Instant, String, u64)>;

/// Windows of this process (memory mode).
#[derive(Default)]
pub struct MemoryWindows {
    keys: Mutex<HashMap<String, Log>>,
}

#[async_trait::async_trait]
impl Window for MemoryWindows {
    async fn take(&self, key: &str, id: &str, want: &Want) -> Result<Option<Duration>, String> {
        let now = Instant::now();
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        let log = keys.entry(key.to_owned()).or_default();
        while log
            .front()
            .is_some_and(|(at, _, _)| now.duration_since(*at) >= want.window)
        {
            log.pop_front();
        }
        Ok(
            match fits(log.iter().map(|(at, _, t)| (*at, *t)), want, now) {
                None => {
                    log.push_back((now, id.to_owned(), want.cost));
                    None
                }
                wait => wait,
            },
        )
    }

    async fn settle(&self, key: &str, id: &str, _counted: u64, used: u64) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = keys
            .get_mut(key)
            .and_then(|log| log.iter_mut().find(|(_, i, _)| i == id))
        {
            e.2 = used;
        }
    }
}

/// Whether a call fits a window whose entries (oldest first, within the
/// window) are `log`: `None`, or how long until the entries that keep it
/// out have left the window.
fn fits(
    log: impl Iterator<Item = (Instant, u64)> + Clone,
    want: &Want,
    now: Instant,
) -> Option<Duration> {
    let left_at = |at: Instant| (at + want.window).saturating_duration_since(now);
    let mut wait = Duration::ZERO;
    if let Some(max) = want.requests {
        let n = log.clone().count() as u64;
        if n >= max {
            // The (n - max + 1)-th oldest must leave first.
            if let Some((at, _)) = log.clone().nth((n - max) as usize) {
                wait = wait.max(left_at(at));
            }
        }
    }
    if let Some(max) = want.tokens {
        let used: u64 = log.clone().map(|(_, t)| t).sum();
        if used + want.cost > max {
            let mut over = used + want.cost - max;
            for (at, t) in log {
                over = over.saturating_sub(t);
                if over == 0 {
                    wait = wait.max(left_at(at));
                    break;
                }
            }
        }
    }
    (!wait.is_zero()).then_some(wait.max(Duration::from_millis(1)))
}

struct Waiter {
    id: String,
    want: Want,
    tx: oneshot::Sender<Result<(), String>>,
}

/// The calls of one limit waiting, by tenant, served round robin.
#[derive(Default)]
struct Room {
    order: VecDeque<String>,
    waiting: HashMap<String, VecDeque<Waiter>>,
    pumping: bool,
    /// When the first in line may go, as the window said last.
    until: Option<Instant>,
}

impl Room {
    fn len(&self) -> usize {
        self.waiting.values().map(VecDeque::len).sum()
    }
}

struct State {
    window: Arc<dyn Window>,
    rooms: Mutex<HashMap<String, Room>>,
    metrics: Arc<crate::metrics::Metrics>,
}

/// The rate limits of every provider entry that has one.
pub struct Limits<I> {
    inner: I,
    specs: HashMap<String, RateLimitSpec>,
    state: Arc<State>,
    ids: AtomicU64,
    process: u64,
}

impl<I> Limits<I> {
    /// The limits of `specs` (by provider entry) around `inner`, counted in
    /// `window`.
    pub fn new(
        inner: I,
        specs: HashMap<String, RateLimitSpec>,
        window: Arc<dyn Window>,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Self {
        Self {
            inner,
            specs,
            state: Arc::new(State {
                window,
                rooms: Mutex::default(),
                metrics,
            }),
            ids: AtomicU64::new(0),
            // Ids unique across replicas: this process's start, then a count.
            process: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                ^ u64::from(std::process::id()),
        }
    }
}

impl State {
    fn rooms(&self) -> std::sync::MutexGuard<'_, HashMap<String, Room>> {
        self.rooms.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets the waiting calls of `key` through, one tenant after another,
    /// as the window allows; ends when nobody waits.
    async fn pump(self: Arc<Self>, key: String, provider: String, fail_open: bool) {
        loop {
            // The next tenant's first waiter still waiting.
            let next = {
                let mut rooms = self.rooms();
                let Some(room) = rooms.get_mut(&key) else {
                    return;
                };
                let mut found = None;
                while let Some(tenant) = room.order.front().cloned() {
                    let queue = room.waiting.entry(tenant.clone()).or_default();
                    while queue.front().is_some_and(|w| w.tx.is_closed()) {
                        queue.pop_front();
                    }
                    match queue.front() {
                        Some(w) => {
                            found = Some((tenant, w.id.clone(), w.want));
                            break;
                        }
                        None => {
                            room.waiting.remove(&tenant);
                            room.order.pop_front();
                        }
                    }
                }
                self.metrics.rate_limit_queue(&provider, room.len());
                match found {
                    Some(f) => f,
                    None => {
                        room.pumping = false;
                        rooms.remove(&key);
                        return;
                    }
                }
            };
            let (tenant, id, want) = next;
            let taken = match self.window.take(&key, &id, &want).await {
                Ok(None) => Ok(()),
                Ok(Some(wait)) => {
                    if let Some(room) = self.rooms().get_mut(&key) {
                        room.until = Some(Instant::now() + wait);
                    }
                    tokio::time::sleep(wait).await;
                    continue;
                }
                Err(_) if fail_open => Ok(()),
                Err(e) => Err(e),
            };
            let mut rooms = self.rooms();
            let Some(room) = rooms.get_mut(&key) else {
                return;
            };
            let queue = room.waiting.entry(tenant.clone()).or_default();
            if let Some(w) = queue.pop_front()
                && let Err(Ok(())) = w.tx.send(taken)
            {
                // Its call left meanwhile: the tokens it counted go back.
                let window = self.window.clone();
                let key = key.clone();
                tokio::spawn(async move { window.settle(&key, &w.id, w.want.cost, 0).await });
            }
            // This tenant goes to the back of the line.
            room.order.pop_front();
            if !queue.is_empty() {
                room.order.push_back(tenant);
            } else {
                room.waiting.remove(&tenant);
            }
        }
    }
}

#[async_trait::async_trait]
impl<I: TryModel> TryModel for Limits<I> {
    async fn try_model(
        &self,
        model: &Arc<dyn Model>,
        call: &ModelCall<'_>,
        sink: &dyn CallSink,
    ) -> Result<ModelTurn, ModelError> {
        let reference = model.reference();
        let (provider, name) = reference.split_once(':').unwrap_or((reference, ""));
        let Some(spec) = self.specs.get(provider) else {
            return self.inner.try_model(model, call, sink).await;
        };
        let mut key = provider.to_owned();
        if spec.per_model {
            key = format!("{key}:{name}");
        }
        if spec.per_tenant {
            key = format!("{key}@{}", call.tenant);
        }
        // A call counts its input and the most it may write: its
        // `max_tokens` (the budget layer's cap), else the model's output
        // limit — but never more than the limit holds alone, so a call
        // without `max_tokens` waits for room instead of being refused.
        let cost = match spec.tokens {
            Some(max) => {
                let input = model.estimate_input_tokens(call.messages, call.tools, call.turn);
                let output = call
                    .max_output
                    .or(call.settings.max_tokens)
                    .or(model.max_output_tokens())
                    .map_or(0, u64::from);
                // A `max_tokens` the agent or request set counts whole (a
                // call over the limit alone is refused); one that is only
                // the model's limit (or the budget's cap of it) is counted
                // at most the limit.
                if call.settings.max_tokens.is_some() {
                    input + output
                } else {
                    (input + output).min(max.max(input))
                }
            }
            None => 0,
        };
        let refused = |kind, error_type: &str, message: String| {
            Err(ModelError::new(reference, kind, error_type, message))
        };
        if let Some(max) = spec.tokens
            && cost > max
        {
            return refused(
                ModelErrorKind::RateLimited,
                LIMITED,
                format!(
                    "this call counts {cost} tokens, over {provider}'s limit of {max} tokens per {:?}",
                    spec.window
                ),
            );
        }
        let want = Want {
            requests: spec.requests,
            tokens: spec.tokens,
            window: spec.window,
            cost,
        };
        let id = format!(
            "{:x}.{}",
            self.process,
            self.ids.fetch_add(1, Ordering::Relaxed)
        );
        let state = &self.state;
        // Nobody of this limit waits here: try at once.
        let queued = state.rooms().get(&key).is_some_and(|r| r.len() > 0);
        let wait = if queued {
            Some(Duration::ZERO)
        } else {
            match state.window.take(&key, &id, &want).await {
                Ok(wait) => wait,
                Err(_) if spec.fail_open => None,
                Err(e) => {
                    return refused(
                        ModelErrorKind::Unavailable,
                        UNREACHABLE,
                        format!("{provider}'s shared rate limit cannot be read: {e}"),
                    );
                }
            }
        };
        if let Some(wait) = wait {
            let (tx, rx) = oneshot::channel();
            let (ahead, start, wait) = {
                let mut rooms = state.rooms();
                let room = rooms.entry(key.clone()).or_default();
                let ahead = room.len();
                // Behind others: about when the first may go, then a
                // window's share per call ahead.
                let head = room.until.map_or(Duration::ZERO, |t| {
                    t.saturating_duration_since(Instant::now())
                });
                let per = spec.requests.map_or(Duration::ZERO, |n| {
                    spec.window / n.clamp(1, u64::from(u32::MAX)) as u32
                });
                let wait = wait.max(head + per * ahead as u32);
                if !room.waiting.contains_key(call.tenant) {
                    room.order.push_back(call.tenant.to_owned());
                }
                room.waiting
                    .entry(call.tenant.to_owned())
                    .or_default()
                    .push_back(Waiter {
                        id: id.clone(),
                        want,
                        tx,
                    });
                state.metrics.rate_limit_queue(provider, room.len());
                let start = !room.pumping;
                room.pumping = true;
                (ahead, start, wait)
            };
            if start {
                tokio::spawn(
                    state
                        .clone()
                        .pump(key.clone(), provider.to_owned(), spec.fail_open),
                );
            }
            sink.waiting(provider, reference, wait, ahead).await;
            let began = Instant::now();
            let let_through = tokio::time::timeout(call.timeout, rx).await;
            state
                .metrics
                .rate_limit_wait(provider, began.elapsed().as_secs_f64());
            match let_through {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    return refused(
                        ModelErrorKind::Unavailable,
                        UNREACHABLE,
                        format!("{provider}'s shared rate limit cannot be read: {e}"),
                    );
                }
                Ok(Err(_)) | Err(_) => {
                    return refused(
                        ModelErrorKind::RateLimited,
                        LIMITED,
                        format!(
                            "waited {:?} (the model timeout) for {provider}'s rate limit",
                            call.timeout
                        ),
                    );
                }
            }
        }
        let answered = self.inner.try_model(model, call, sink).await;
        if spec.tokens.is_some() {
            let used = answered
                .as_ref()
                .map_or(0, |t| t.usage.input_tokens + t.usage.output_tokens);
            let window = state.window.clone();
            // Off the call's path: the count is right again a moment later.
            tokio::spawn(async move { window.settle(&key, &id, cost, used).await });
        }
        answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want(requests: Option<u64>, tokens: Option<u64>, cost: u64) -> Want {
        Want {
            requests,
            tokens,
            window: Duration::from_secs(10),
            cost,
        }
    }

    #[tokio::test]
    async fn a_window_lets_n_calls_through_then_says_when_the_next_fits() {
        let w = MemoryWindows::default();
        for i in 0..3 {
            assert_eq!(
                w.take("k", &i.to_string(), &want(Some(3), None, 0)).await,
                Ok(None)
            );
        }
        let wait = w
            .take("k", "3", &want(Some(3), None, 0))
            .await
            .expect("ok")
            .expect("full");
        assert!(
            wait > Duration::from_secs(9) && wait <= Duration::from_secs(10),
            "{wait:?}"
        );
        // Another key is its own window.
        assert_eq!(
            w.take("other", "x", &want(Some(3), None, 0)).await,
            Ok(None)
        );
    }

    #[test]
    fn tokens_fit_until_the_window_holds_too_many_and_wait_for_enough_to_leave() {
        let t0 = Instant::now();
        let log = [
            (t0, 40u64),
            (t0 + Duration::from_secs(2), 40),
            (t0 + Duration::from_secs(4), 10),
        ];
        let now = t0 + Duration::from_secs(5);
        // 90 used of 100: 10 more fit, 11 do not.
        assert_eq!(
            fits(log.iter().copied(), &want(None, Some(100), 10), now),
            None
        );
        // 30 more: the first 40 must leave (at 10s, 5s from now).
        assert_eq!(
            fits(log.iter().copied(), &want(None, Some(100), 30), now),
            Some(Duration::from_secs(5))
        );
        // 60 more: the first two must leave (at 12s).
        assert_eq!(
            fits(log.iter().copied(), &want(None, Some(100), 60), now),
            Some(Duration::from_secs(7))
        );
        // Requests: 3 of 3, the oldest leaves at 10s.
        assert_eq!(
            fits(log.iter().copied(), &want(Some(3), None, 0), now),
            Some(Duration::from_secs(5))
        );
    }

    /// A model that answers at once.
    struct Quick;

    #[async_trait::async_trait]
    impl Model for Quick {
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

    struct Direct;

    #[async_trait::async_trait]
    impl TryModel for Direct {
        async fn try_model(
            &self,
            model: &Arc<dyn Model>,
            call: &ModelCall<'_>,
            sink: &dyn CallSink,
        ) -> Result<ModelTurn, ModelError> {
            model.turn(call.request(call.settings), sink).await
        }
    }

    struct Quiet;

    #[async_trait::async_trait]
    impl crate::model::DeltaSink for Quiet {
        async fn delta(&self, _: String) {}
    }

    #[async_trait::async_trait]
    impl CallSink for Quiet {
        async fn fell_back(
            &self,
            _: &str,
            _: &str,
            _: &crate::model::call::request::Skipped,
            _: bool,
        ) {
        }
        async fn waiting(&self, _: &str, _: &str, _: Duration, _: usize) {}
    }

    /// Counters that do not answer (Redis down).
    struct Down;

    #[async_trait::async_trait]
    impl Window for Down {
        async fn take(&self, _: &str, _: &str, _: &Want) -> Result<Option<Duration>, String> {
            Err("connection refused".into())
        }
        async fn settle(&self, _: &str, _: &str, _: u64, _: u64) {}
    }

    #[tokio::test]
    async fn unreachable_counters_fail_the_call_closed_unless_the_limit_fails_open() {
        for fail_open in [false, true] {
            let spec = RateLimitSpec {
                requests: Some(10),
                tokens: None,
                window: Duration::from_secs(1),
                per_model: false,
                per_tenant: false,
                fail_open,
            };
            let limits = Limits::new(
                Direct,
                [("p".to_owned(), spec)].into_iter().collect(),
                Arc::new(Down),
                Arc::default(),
            );
            let model: Arc<dyn Model> = Arc::new(Quick);
            let fixture = crate::model::call::request::TestCall::default();
            let models = [model.clone()];
            let call = fixture.call(&models, &[], "t", Duration::from_secs(1));
            let answered = limits.try_model(&model, &call, &Quiet).await;
            match (fail_open, answered) {
                (false, Err(e)) => {
                    assert_eq!(e.error_type, "limit_unreachable");
                    assert_eq!(e.code(), tonic::Code::Unavailable);
                    assert!(e.message.contains("connection refused"), "{e}");
                }
                (true, Ok(_)) => {}
                (open, other) => panic!("fail_open {open}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn waiting_calls_go_through_one_tenant_after_another() {
        let spec = RateLimitSpec {
            requests: Some(1),
            tokens: None,
            window: Duration::from_millis(100),
            per_model: false,
            per_tenant: false,
            fail_open: false,
        };
        let limits = Arc::new(Limits::new(
            Direct,
            [("p".to_owned(), spec)].into_iter().collect(),
            Arc::new(MemoryWindows::default()),
            Arc::default(),
        ));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Tenant a's burst of four, queued before b's one call.
        for (i, tenant) in ["a", "a", "a", "a", "b"].into_iter().enumerate() {
            let (limits, order) = (limits.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let model: Arc<dyn Model> = Arc::new(Quick);
                let fixture = crate::model::call::request::TestCall::default();
                let models = [model.clone()];
                let call = fixture.call(&models, &[], tenant, Duration::from_secs(30));
                limits
                    .try_model(&model, &call, &Quiet)
                    .await
                    .expect("let through");
                order.lock().expect("ok").push(format!("{tenant}{i}"));
            }));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for t in tasks {
            t.await.expect("task");
        }
        // a0 at once; then b's call before the rest of a's burst.
        let order = order.lock().expect("ok").clone();
        assert_eq!(order[..2], ["a0".to_owned(), "a1".to_owned()]);
        assert_eq!(order[2], "b4", "{order:?}");
        assert_eq!(order.len(), 5);
    }

    /// Keeps the waits it is told.
    #[derive(Default)]
    struct Told(Mutex<Vec<(Duration, usize)>>);

    #[async_trait::async_trait]
    impl crate::model::DeltaSink for Told {
        async fn delta(&self, _: String) {}
    }

    #[async_trait::async_trait]
    impl CallSink for Told {
        async fn fell_back(
            &self,
            _: &str,
            _: &str,
            _: &crate::model::call::request::Skipped,
            _: bool,
        ) {
        }
        async fn waiting(&self, _: &str, _: &str, wait: Duration, ahead: usize) {
            self.0.lock().expect("told").push((wait, ahead));
        }
    }

    #[tokio::test]
    async fn a_call_behind_others_is_told_about_how_long_it_waits() {
        let spec = RateLimitSpec {
            requests: Some(1),
            tokens: None,
            window: Duration::from_millis(400),
            per_model: false,
            per_tenant: false,
            fail_open: false,
        };
        let limits = Arc::new(Limits::new(
            Direct,
            [("p".to_owned(), spec)].into_iter().collect(),
            Arc::new(MemoryWindows::default()),
            Arc::default(),
        ));
        let told = Arc::new(Told::default());
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let (limits, told) = (limits.clone(), told.clone());
            tasks.push(tokio::spawn(async move {
                let model: Arc<dyn Model> = Arc::new(Quick);
                let fixture = crate::model::call::request::TestCall::default();
                let models = [model.clone()];
                let call = fixture.call(&models, &[], "t", Duration::from_secs(30));
                limits
                    .try_model(&model, &call, &*told)
                    .await
                    .expect("through");
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for t in tasks {
            t.await.expect("task");
        }
        let told = told.0.lock().expect("told").clone();
        // The second waits for the first's place in the window; the third,
        // behind it, about one more window share: never "0 s".
        assert_eq!(told.len(), 2, "{told:?}");
        assert!(told[0].0 > Duration::from_millis(300), "{told:?}");
        assert_eq!(told[1].1, 1);
        assert!(told[1].0 > Duration::from_millis(600), "{told:?}");
    }
}
