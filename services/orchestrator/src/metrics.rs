//! The orchestrator's Prometheus metrics (served on
//! `telemetry.metrics_listen`, see `baton_common::metrics`).
//!
//! | metric | labels |
//! |---|---|
//! | `baton_runs_started_total` | `kind` (agent, pipeline) |
//! | `baton_runs_finished_total` | `kind`, `status` (completed, failed, cancelled) |
//! | `baton_runs_active` | |
//! | `baton_events_emitted_total` | |
//! | `baton_model_call_duration_seconds` | `model`, `outcome` (ok, error) |
//! | `baton_tool_call_duration_seconds` | `tool`, `outcome` |
//! | `baton_model_tokens_total` | `model`, `direction` (input, output) |
//! | `baton_model_cost_nanos_total` | `model`, `currency` (billionths of it; priced models only) |
//! | `baton_model_errors_total` | `model`, `kind` (the HTTP status, `timeout`, `connection`, `stream`, …) |
//! | `baton_model_fallbacks_total` | `from`, `to`, `reason` (rate_limited, unavailable, timeout, breaker_open, context_window) |
//! | `baton_model_breaker_open` | `provider` (1 while its circuit breaker is open on this replica) |
//! | `baton_model_breaker_probing` | `provider` (1 while a call of this replica probes it) |
//! | `baton_budget_exhausted_total` | `action` (fail, finish, ask) |
//! | `baton_rate_limit_queue` | `provider` (calls waiting for its rate limit on this replica) |
//! | `baton_rate_limit_wait_seconds` | `provider` (how long calls waited for it) |
//! | `baton_live_scores_total` | `agent`, `scorer`, `passed` (live runs scored: an agent's `scoring`) |
//! | `baton_tenant_runs` | `tenant` (runs not ended on this replica) |
//! | `baton_tenant_runs_waiting` | `tenant` (of them, waiting for a person) |
//! | `baton_tenant_model_tokens_total` | `tenant` |
//! | `baton_quota_refusals_total` | `tenant`, `quota` |
//! | `baton_tenant_model_tokens_held` | `tenant` (tokens this replica's calls in flight hold of its period budgets) |

use std::sync::Arc;

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use std::collections::HashSet;

use baton_common::metrics::{Histograms, Labels, latency_histograms};

/// Every metric of one orchestrator instance.
pub struct Metrics {
    /// What `/metrics` serves.
    pub registry: Arc<Registry>,
    runs_started: Family<Labels, Counter>,
    runs_finished: Family<Labels, Counter>,
    agents_reloads: Family<Labels, Counter>,
    runs_active: Gauge,
    /// Events sequenced, across runs.
    pub events: Counter,
    model_latency: Histograms,
    tool_latency: Histograms,
    tokens: Family<Labels, Counter>,
    cost: Family<Labels, Counter>,
    model_errors: Family<Labels, Counter>,
    fallbacks: Family<Labels, Counter>,
    breakers: Family<Labels, Gauge>,
    probing: Family<Labels, Gauge>,
    budgets: Family<Labels, Counter>,
    limit_queue: Family<Labels, Gauge>,
    limit_wait: Histograms,
    live_scores: Family<Labels, Counter>,
    /// Model references and tool names that may be label values; anything
    /// else (a request's own default_model, a tool name a model made up)
    /// counts as `other`, so no client can grow the label sets.
    known_models: HashSet<String>,
    known_tools: HashSet<String>,
    /// Each model label's series of `model_call`, taken once (a model
    /// call looked up and hashed four label sets before).
    model_series: std::sync::RwLock<std::collections::HashMap<String, Arc<ModelSeries>>>,
    /// Per-tenant usage of the quotas (see `run::quota`).
    pub quota: QuotaMetrics,
}

/// The label value of a model or tool not in the catalog.
pub const OTHER: &str = "other";

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Metrics whose model and tool labels are the catalog's: its default
    /// model, its agents' models, their tools and handoffs.
    pub fn with_catalog(catalog: &crate::catalog::Catalog) -> Self {
        let mut m = Self::new();
        m.known_models.insert(catalog.default_model.clone());
        for agent in catalog.agents.values() {
            m.known_models.insert(agent.spec.model.clone());
            m.known_models.extend(agent.spec.fallbacks.iter().cloned());
            m.known_models
                .extend(agent.spec.context_window_fallbacks.iter().cloned());
            m.known_tools.extend(agent.spec.tools.iter().cloned());
            m.known_tools.extend(
                agent
                    .spec
                    .handoffs
                    .iter()
                    .map(|h| format!("transfer_to_{h}")),
            );
        }
        m.known_models.remove("");
        m
    }

    fn model_label(&self, model: &str) -> String {
        if self.known_models.contains(model) {
            model
        } else {
            OTHER
        }
        .to_owned()
    }

    fn tool_label(&self, tool: &str) -> String {
        if self.known_tools.contains(tool) {
            tool
        } else {
            OTHER
        }
        .to_owned()
    }

    /// Registers every metric in a fresh registry (no model or tool names
    /// known: every one is `other`).
    pub fn new() -> Self {
        let mut r = Registry::default();
        let runs_started = Family::<Labels, Counter>::default();
        let runs_finished = Family::<Labels, Counter>::default();
        let runs_active = Gauge::default();
        let agents_reloads = Family::<Labels, Counter>::default();
        let events = Counter::default();
        let model_latency = latency_histograms();
        let tool_latency = latency_histograms();
        let tokens = Family::<Labels, Counter>::default();
        r.register(
            "baton_runs_started",
            "Runs started, by kind",
            runs_started.clone(),
        );
        r.register(
            "baton_runs_finished",
            "Runs finished, by kind and final status",
            runs_finished.clone(),
        );
        r.register("baton_runs_active", "Runs in progress", runs_active.clone());
        r.register(
            "baton_agents_reloads",
            "Changed agents files taken (result=taken) or refused (result=refused)",
            agents_reloads.clone(),
        );
        r.register(
            "baton_events_emitted",
            "Events sequenced onto run streams",
            events.clone(),
        );
        r.register(
            "baton_model_call_duration_seconds",
            "Latency of one model turn",
            model_latency.clone(),
        );
        r.register(
            "baton_tool_call_duration_seconds",
            "Latency of one tool call, waits for people included",
            tool_latency.clone(),
        );
        r.register(
            "baton_model_tokens",
            "Tokens reported by models",
            tokens.clone(),
        );
        let cost = Family::<Labels, Counter>::default();
        r.register(
            "baton_model_cost_nanos",
            "What priced model calls cost, in billionths of the prices' currency",
            cost.clone(),
        );
        let model_errors = Family::<Labels, Counter>::default();
        r.register(
            "baton_model_errors",
            "Failed model calls (after the provider's retries), by model and kind",
            model_errors.clone(),
        );
        let fallbacks = Family::<Labels, Counter>::default();
        r.register(
            "baton_model_fallbacks",
            "Model calls moved to a fallback model, by from, to and reason",
            fallbacks.clone(),
        );
        let breakers = Family::<Labels, Gauge>::default();
        r.register(
            "baton_model_breaker_open",
            "1 while a provider's circuit breaker is open on this replica",
            breakers.clone(),
        );
        let budgets = Family::<Labels, Counter>::default();
        r.register(
            "baton_budget_exhausted",
            "Model calls a budget had too little left for, by what the agent did",
            budgets.clone(),
        );
        let limit_queue = Family::<Labels, Gauge>::default();
        r.register(
            "baton_rate_limit_queue",
            "Model calls waiting for their provider's rate limit on this replica",
            limit_queue.clone(),
        );
        let limit_wait = latency_histograms();
        r.register(
            "baton_rate_limit_wait_seconds",
            "How long model calls waited for their provider's rate limit",
            limit_wait.clone(),
        );
        let quota = QuotaMetrics::default();
        r.register(
            "baton_tenant_model_tokens_held",
            "Tokens this replica's model calls in flight hold of their tenant's period budgets",
            quota.held.clone(),
        );
        let probing = Family::<Labels, Gauge>::default();
        r.register(
            "baton_model_breaker_probing",
            "1 while a model call of this replica probes the provider's open circuit breaker",
            probing.clone(),
        );
        let live_scores = Family::<Labels, Counter>::default();
        r.register(
            "baton_live_scores",
            "Live runs scored (an agent's scoring in the agents file), by agent, scorer and whether it passed",
            live_scores.clone(),
        );
        r.register(
            "baton_tenant_runs",
            "Runs not ended on this replica, by tenant",
            quota.runs.clone(),
        );
        r.register(
            "baton_tenant_runs_waiting",
            "Runs on this replica waiting for a person, by tenant",
            quota.waiting.clone(),
        );
        r.register(
            "baton_tenant_model_tokens",
            "Model tokens used by this replica's runs, by tenant",
            quota.tokens.clone(),
        );
        r.register(
            "baton_quota_refusals",
            "Runs and model turns refused by a quota, by tenant and quota",
            quota.refusals.clone(),
        );
        Self {
            registry: Arc::new(r),
            quota,
            runs_started,
            runs_finished,
            agents_reloads,
            runs_active,
            events,
            model_latency,
            tool_latency,
            tokens,
            cost,
            model_errors,
            fallbacks,
            breakers,
            probing,
            budgets,
            limit_queue,
            limit_wait,
            live_scores,
            known_models: HashSet::new(),
            known_tools: HashSet::new(),
            model_series: Default::default(),
        }
    }

    /// A live run of `agent` was scored by `scorer` (names from the agents
    /// file: bounded).
    pub fn live_score(&self, agent: &str, scorer: &str, passed: bool) {
        self.live_scores
            .get_or_create(&vec![
                ("agent", agent.to_owned()),
                ("scorer", scorer.to_owned()),
                ("passed", passed.to_string()),
            ])
            .inc();
    }

    /// A run of `kind` started.
    pub fn run_started(&self, kind: &str) {
        self.runs_started
            .get_or_create(&vec![("kind", kind.to_owned())])
            .inc();
        self.runs_active.inc();
    }

    /// A run of `kind` ended with `status`.
    pub fn run_finished(&self, kind: &str, status: &str) {
        self.runs_finished
            .get_or_create(&vec![
                ("kind", kind.to_owned()),
                ("status", status.to_owned()),
            ])
            .inc();
        self.runs_active.dec();
    }

    /// A changed agents file was taken (`true`) or refused.
    pub fn agents_reloaded(&self, taken: bool) {
        let result = if taken { "taken" } else { "refused" };
        self.agents_reloads
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
    }

    /// One model turn took `seconds`.
    /// `cost`: what it cost, in billionths of the currency, when priced.
    pub fn model_call(
        &self,
        model: &str,
        ok: bool,
        seconds: f64,
        input: u64,
        output: u64,
        cost: Option<(u64, &str)>,
    ) {
        let series = self.series_of(model);
        let label = || series.model.clone();
        let latency = if ok { &series.ok } else { &series.failed };
        latency
            .get_or_init(|| {
                self.model_latency
                    .get_or_create(&vec![("model", label()), ("outcome", outcome(ok))])
                    .clone()
            })
            .observe(seconds);
        let tokens = |direction: &'static str| {
            self.tokens
                .get_or_create(&vec![("model", label()), ("direction", direction.into())])
                .clone()
        };
        if input > 0 {
            series.input.get_or_init(|| tokens("input")).inc_by(input);
        }
        if output > 0 {
            series
                .output
                .get_or_init(|| tokens("output"))
                .inc_by(output);
        }
        if let Some((nanos, currency)) = cost {
            let counter = series.cost.get_or_init(|| {
                let c = self
                    .cost
                    .get_or_create(&vec![("model", label()), ("currency", currency.to_owned())])
                    .clone();
                (currency.to_owned(), c)
            });
            if counter.0 == currency {
                counter.1.inc_by(nanos);
            } else {
                // One currency for every price (see `catalog::prices`);
                // counted all the same.
                self.cost
                    .get_or_create(&vec![("model", label()), ("currency", currency.to_owned())])
                    .inc_by(nanos);
            }
        }
    }

    /// The series of model `model` (its label: the model, or `other`).
    fn series_of(&self, model: &str) -> Arc<ModelSeries> {
        if let Some(s) = self
            .model_series
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(model)
        {
            return s.clone();
        }
        // Any name beyond the known ones shares `other`'s series (and is
        // not kept: no client grows the map).
        let label = self.model_label(model);
        if let Some(s) = self
            .model_series
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&label)
        {
            return s.clone();
        }
        self.model_series
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(label.clone())
            .or_insert_with(|| {
                Arc::new(ModelSeries {
                    model: label,
                    ..Default::default()
                })
            })
            .clone()
    }

    /// A model call failed with `kind` (its `error_type`).
    pub fn model_error(&self, model: &str, kind: &str) {
        self.model_errors
            .get_or_create(&vec![
                ("model", self.model_label(model)),
                ("kind", kind.to_owned()),
            ])
            .inc();
    }

    /// A call moved from `from` to `to` for `reason`.
    pub fn fallback(&self, from: &str, to: &str, reason: &str) {
        self.fallbacks
            .get_or_create(&vec![
                ("from", self.model_label(from)),
                ("to", self.model_label(to)),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// Whether `provider`'s breaker is open now.
    pub fn breaker(&self, provider: &str, open: bool) {
        self.breakers
            .get_or_create(&vec![("provider", provider.to_owned())])
            .set(i64::from(open));
    }

    /// A call of this replica probes `provider`'s breaker, or no longer.
    pub fn breaker_probing(&self, provider: &str, probing: bool) {
        self.probing
            .get_or_create(&vec![("provider", provider.to_owned())])
            .set(i64::from(probing));
    }

    /// `n` calls wait for `provider`'s rate limit here.
    pub fn rate_limit_queue(&self, provider: &str, n: usize) {
        self.limit_queue
            .get_or_create(&vec![("provider", provider.to_owned())])
            .set(n as i64);
    }

    /// A call waited `seconds` for `provider`'s rate limit.
    pub fn rate_limit_wait(&self, provider: &str, seconds: f64) {
        self.limit_wait
            .get_or_create(&vec![("provider", provider.to_owned())])
            .observe(seconds);
    }

    /// A budget ran out; the agent did `action`.
    pub fn budget_exhausted(&self, action: &str) {
        self.budgets
            .get_or_create(&vec![("action", action.to_owned())])
            .inc();
    }

    /// One tool call took `seconds`.
    pub fn tool_call(&self, tool: &str, ok: bool, seconds: f64) {
        self.tool_latency
            .get_or_create(&vec![
                ("tool", self.tool_label(tool)),
                ("outcome", outcome(ok)),
            ])
            .observe(seconds);
    }
}

fn outcome(ok: bool) -> String {
    if ok { "ok" } else { "error" }.to_owned()
}

/// The series one model's calls count in, taken on first use.
#[derive(Default)]
struct ModelSeries {
    model: String,
    ok: std::sync::OnceLock<prometheus_client::metrics::histogram::Histogram>,
    failed: std::sync::OnceLock<prometheus_client::metrics::histogram::Histogram>,
    input: std::sync::OnceLock<Counter>,
    output: std::sync::OnceLock<Counter>,
    cost: std::sync::OnceLock<(String, Counter)>,
}

/// The per-tenant metrics.
#[derive(Clone, Default)]
pub struct QuotaMetrics {
    /// Runs not ended on this replica.
    pub runs: Family<Vec<(&'static str, String)>, Gauge>,
    /// Runs waiting for people on this replica (in memory).
    pub waiting: Family<Vec<(&'static str, String)>, Gauge>,
    /// Model tokens used by this replica's runs.
    pub tokens: Family<Vec<(&'static str, String)>, Counter>,
    /// Runs and model turns refused by a quota.
    pub refusals: Family<Vec<(&'static str, String)>, Counter>,
    /// Tokens this replica's calls in flight hold of period budgets.
    pub held: Family<Vec<(&'static str, String)>, Gauge>,
}
