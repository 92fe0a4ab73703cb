//! [`Shared`]: what the orchestrator builds once at start and every run
//! shares — the catalog, model providers, tools, context store, tracer,
//! metrics and the server's limits. The application core holds one `Arc`
//! of it and each run another; nothing in it changes while the process runs.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use baton_common::otel::Tracing;
use baton_store::ContextStore;

use super::{
    durable::{OpenError, RedisRuns},
    quota::RunQuotas,
};
use crate::{
    catalog::Catalog,
    config::{PipelineLimits, QuotaConfig, RunDefaults, RunStoreMode, SERVICE_NAME},
    metrics::Metrics,
    model::{Models, SetupError, ToolDef},
    tools::{ToolServerError, Toolbox},
};

/// Why what runs share cannot be built at start; each part's message
/// names its field (`providers.openai.api_key_env`, `runs.redis…`).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The run store (`runs.store = "redis"`).
    #[error(transparent)]
    RunStore(#[from] OpenError),
    /// A model provider.
    #[error(transparent)]
    Models(#[from] SetupError),
    /// A tool server.
    #[error(transparent)]
    Tools(#[from] ToolServerError),
}

/// An agent's tool definitions and the toolbox generation they were built at.
type ToolDefs = (u64, Arc<[ToolDef]>);

/// What every run shares, built once.
pub struct Shared {
    /// Agents, groups, scripts, tool servers.
    pub catalog: Arc<Catalog>,
    /// Model resolution.
    pub models: Arc<Models>,
    /// Built-in and remote tools by name.
    pub tools: Arc<Toolbox>,
    /// The context store of every trace's slots.
    pub store: Arc<dyn ContextStore>,
    /// Makes spans (exported when the config names an endpoint).
    pub tracing: Tracing,
    /// The service's metrics.
    pub metrics: Arc<Metrics>,
    /// The server's run defaults and limits (`runs.*`).
    pub defaults: RunDefaults,
    /// Limits on pipelines, from `defaults`.
    pub pipeline_limits: PipelineLimits,
    /// The run store in Redis when `runs.store = "redis"`.
    pub durable: Option<Arc<RedisRuns>>,
    /// The tenants' quotas and their usage.
    pub quotas: Arc<RunQuotas>,
    /// The model-call stack (budget, fallback, breaker, attempt).
    pub calls: Arc<crate::model::call::Stack>,
    /// The conversations (in Redis with durable runs).
    pub conversations: Arc<crate::conversation::Conversations>,
    /// What each agent's model is told about its tools, by agent (and
    /// group), with the toolbox generation it was built at.
    tool_defs: Mutex<HashMap<String, ToolDefs>>,
}

/// The model-call stack of `catalog`'s providers; rate limits counted in
/// Redis when runs are durable, else here.
fn call_stack(
    catalog: &Catalog,
    tracing: &Tracing,
    metrics: &Arc<Metrics>,
    durable: Option<&Arc<RedisRuns>>,
) -> Arc<crate::model::call::Stack> {
    use crate::model::call::{Observe, limit, stack};
    let window: Arc<dyn limit::Window> = match durable {
        Some(d) => Arc::new(crate::shared_state::limits::LeasedWindows::new(
            d.shared().clone(),
        )),
        None => Arc::new(limit::MemoryWindows::default()),
    };
    let shared =
        durable.map(|d| d.shared().clone() as Arc<dyn crate::model::call::breaker::SharedBreakers>);
    let observe = Observe {
        tracer: tracing.tracer().clone(),
        metrics: metrics.clone(),
    };
    Arc::new(stack(catalog, observe, window, shared))
}

/// Conversations in Redis when runs are durable (through the run store's
/// shared state: its one connection), else in the process.
fn conversations(
    config: crate::config::conversations::ConversationConfig,
    durable: Option<&Arc<RedisRuns>>,
) -> Arc<crate::conversation::Conversations> {
    use crate::conversation::{
        Conversations, memory::MemoryStore, redis::RedisStore, store::Store,
    };
    let store: Arc<dyn Store> = match durable {
        Some(d) => Arc::new(RedisStore::new(d.shared().clone())),
        None => Arc::new(MemoryStore::new(config.max_kept)),
    };
    Arc::new(Conversations::new(store, config))
}

impl Shared {
    /// Everything `catalog`'s agents need on `store`; provider keys are read
    /// through `env`.
    pub fn new(
        catalog: Arc<Catalog>,
        store: Arc<dyn ContextStore>,
        defaults: RunDefaults,
        tracing: Tracing,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, StartError> {
        let metrics = Arc::new(Metrics::with_catalog(&catalog));
        let durable = match defaults.store {
            RunStoreMode::Memory => None,
            RunStoreMode::Redis => Some(Arc::new(RedisRuns::new(
                &defaults.redis,
                defaults.retention,
                &defaults.replica_name(),
                defaults.lease,
            )?)),
        };
        Ok(Self {
            models: Arc::new(Models::new(catalog.clone(), env)?),
            tools: Arc::new(Toolbox::new(&catalog, env)?),
            calls: call_stack(&catalog, &tracing, &metrics, durable.as_ref()),
            conversations: conversations(Default::default(), durable.as_ref()),
            quotas: Arc::new(RunQuotas::new(
                QuotaConfig::default(),
                durable.as_ref().map(|d| d.shared().clone()),
                metrics.quota.clone(),
            )),
            metrics,
            pipeline_limits: PipelineLimits {
                max_steps: defaults.max_pipeline_steps,
                default_concurrency: defaults.pipeline_concurrency,
                max_concurrency: defaults.max_pipeline_concurrency,
                max_retries: defaults.max_step_retries,
                max_step_timeout: defaults.max_timeout,
            },
            durable,
            catalog,
            store,
            tracing,
            defaults,
            tool_defs: Mutex::default(),
        })
    }

    /// These services around another `catalog` (the agents file read
    /// again): its models and tools built anew; the store, tracer, metrics,
    /// run store, quotas and defaults shared with these.
    pub fn with_catalog(
        &self,
        catalog: Arc<Catalog>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, StartError> {
        Ok(Self {
            models: Arc::new(Models::new(catalog.clone(), env)?),
            tools: Arc::new(Toolbox::new(&catalog, env)?),
            // The breakers start closed again, with the file's settings.
            calls: call_stack(
                &catalog,
                &self.tracing,
                &self.metrics,
                self.durable.as_ref(),
            ),
            catalog,
            store: self.store.clone(),
            tracing: self.tracing.clone(),
            metrics: self.metrics.clone(),
            defaults: self.defaults.clone(),
            pipeline_limits: self.pipeline_limits,
            durable: self.durable.clone(),
            quotas: self.quotas.clone(),
            conversations: self.conversations.clone(),
            tool_defs: Mutex::default(),
        })
    }

    /// These services with the tenants' quotas of `config`.
    pub fn with_quotas(mut self, config: QuotaConfig) -> Self {
        self.quotas = Arc::new(RunQuotas::new(
            config,
            self.durable.as_ref().map(|d| d.shared().clone()),
            self.metrics.quota.clone(),
        ));
        self
    }

    /// These services with the conversations' bounds of `config`.
    pub fn with_conversations(
        mut self,
        config: crate::config::conversations::ConversationConfig,
    ) -> Self {
        // The store stays (Redis's connection); memory mode's is bounded
        // by the config's `max_kept`.
        let store: Arc<dyn crate::conversation::store::Store> = match self.durable {
            Some(_) => self.conversations.store.clone(),
            None => Arc::new(crate::conversation::memory::MemoryStore::new(
                config.max_kept,
            )),
        };
        self.conversations = Arc::new(crate::conversation::Conversations::new(store, config));
        self
    }

    /// The tool definitions of `key` (an agent, in a group or not), built by
    /// `build` once and shared by every run until a tool server lists its
    /// tools again: a run holds them for as long as an agent runs — parked
    /// on a person too — so they must not be a copy per run.
    pub fn tool_defs(&self, key: &str, build: impl FnOnce() -> Vec<ToolDef>) -> Arc<[ToolDef]> {
        let generation = self.tools.generation();
        let mut cache = self.tool_defs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((built_at, defs)) = cache.get(key)
            && *built_at == generation
        {
            return defs.clone();
        }
        let defs: Arc<[ToolDef]> = build().into();
        cache.insert(key.to_owned(), (generation, defs.clone()));
        defs
    }

    /// Spans made but not exported (tests, fuzzing).
    pub fn untraced() -> Tracing {
        Tracing::with_env(&Default::default(), SERVICE_NAME, |_| None)
            .expect("the default telemetry config is valid")
    }
}
