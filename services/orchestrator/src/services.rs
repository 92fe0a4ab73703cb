//! [`Services`]: what the orchestrator builds once at start and every run
//! shares — the catalog, model providers, tools, context store, tracer,
//! metrics and the server's limits. The gRPC service holds one `Arc` of it
//! and each run another; nothing in it changes while the process runs.

use std::sync::Arc;

use baton_common::otel::Tracing;
use baton_context_store::store::ContextStore;

use crate::{
    catalog::Catalog, config::RunDefaults, metrics::Metrics, model::Models,
    pipeline::PipelineLimits, tools::Toolbox,
};

/// What every run shares, built once.
pub struct Services {
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
}

impl Services {
    /// Everything `catalog`'s agents need on `store`; provider keys are read
    /// through `env`.
    pub fn new(
        catalog: Arc<Catalog>,
        store: Arc<dyn ContextStore>,
        defaults: RunDefaults,
        tracing: Tracing,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        Ok(Self {
            models: Arc::new(Models::new(catalog.clone(), env)?),
            tools: Arc::new(Toolbox::new(&catalog)?),
            metrics: Arc::new(Metrics::with_catalog(&catalog)),
            pipeline_limits: PipelineLimits {
                max_steps: defaults.max_pipeline_steps,
                default_concurrency: defaults.pipeline_concurrency,
                max_concurrency: defaults.max_pipeline_concurrency,
                max_retries: defaults.max_step_retries,
                max_step_timeout: defaults.max_timeout,
            },
            catalog,
            store,
            tracing,
            defaults,
        })
    }

    /// Spans made but not exported (tests, fuzzing).
    pub fn untraced() -> Tracing {
        Tracing::with_env(&Default::default(), crate::SERVICE_NAME, |_| None)
            .expect("the default telemetry config is valid")
    }
}
