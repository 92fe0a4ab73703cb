//! Models: what turns a conversation into the next assistant turn.
//!
//! A model reference is `provider:model`. `provider` is `scripted` (turns
//! written in the agents file; deterministic, used by tests and the demo)
//! or the name of an entry of the agents file's `providers` map, whose
//! `kind` is `openai` (any OpenAI-compatible Chat Completions endpoint) or
//! `anthropic` (the Messages API). Precedence when resolving an agent's
//! model: the agent's own, else the request's default, else the server's
//! default. Generation settings: see [`crate::catalog::settings`].
//!
//! The files, bottom to top: [`chat`] (the conversation), [`error`] and
//! [`turn`] (the [`Model`] interface) are what every provider uses;
//! [`http`] is shared by the HTTP providers ([`openai`], [`anthropic`]);
//! [`scripted`] plays turns written in the agents file. This file only
//! re-exports them and resolves references to models ([`Models`]); no
//! provider reads it.

pub mod anthropic;
pub mod asked;
pub mod call;
pub mod chat;
pub mod error;
pub mod http;
pub mod openai;
pub mod scripted;
pub mod turn;

use std::{collections::BTreeMap, sync::Arc};

use crate::catalog::{Catalog, models::ProviderKind, parse_model_ref};

pub use chat::{ChatMessage, Role, ToolCallRequest, ToolDef};
pub use error::{ModelError, ModelErrorKind, ResolveError, SetupError};
pub use turn::{DeltaSink, Model, ModelRequest, ModelTurn, TokenUsage};

/// A configured provider entry.
enum Provider {
    OpenAi(Arc<openai::OpenAiProvider>),
    Anthropic(Arc<anthropic::AnthropicProvider>),
}

/// Resolves model references to models.
pub struct Models {
    catalog: Arc<Catalog>,
    providers: BTreeMap<String, Provider>,
}

impl Models {
    /// Resolves against the scripts and providers of `catalog`; provider keys
    /// are read through `env` (the process environment in production).
    pub fn new(
        catalog: Arc<Catalog>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SetupError> {
        let mut providers = BTreeMap::new();
        for (name, spec) in &catalog.providers {
            let provider = match spec.kind_of(name)? {
                // Its models are the agents file's scripts.
                ProviderKind::Scripted => continue,
                ProviderKind::Openai => {
                    Provider::OpenAi(Arc::new(openai::OpenAiProvider::new(name, spec, env)?))
                }
                ProviderKind::Anthropic => Provider::Anthropic(Arc::new(
                    anthropic::AnthropicProvider::new(name, spec, env)?,
                )),
            };
            providers.insert(name.clone(), provider);
        }
        Ok(Self { catalog, providers })
    }

    /// The model for `reference`.
    pub fn resolve(&self, reference: &str) -> Result<Arc<dyn Model>, ResolveError> {
        let (provider, name) = parse_model_ref(reference)?;
        if crate::catalog::models::scripted(&self.catalog.providers, provider) {
            let turns = self
                .catalog
                .scripts
                .get(name)
                .ok_or_else(|| ResolveError::NoScript {
                    reference: reference.to_owned(),
                    script: name.to_owned(),
                })?;
            let limit = self.catalog.prices.max_output_tokens(reference);
            return Ok(Arc::new(
                scripted::ScriptedModel::new(reference, turns.clone())
                    .with_max_output(Some(limit.unwrap_or(self.default_max_output()))),
            ));
        }
        let spec = self.catalog.providers.get(provider);
        let (Some(spec), Some(p)) = (spec, self.providers.get(provider)) else {
            return Err(ResolveError::UnknownProvider {
                reference: reference.to_owned(),
                provider: provider.to_owned(),
                known: self.catalog.known_providers(),
            });
        };
        let entry = spec.models.get(name);
        let settings = match entry {
            Some(m) => spec.settings.merged(&m.settings),
            None => spec.settings.clone(),
        };
        let stream = entry.and_then(|m| m.stream).or(spec.stream).unwrap_or(true);
        // What the model may write in one answer: its entry's limit, the
        // prices file's, else the agents file's default (Anthropic's, the
        // `max_tokens` it is sent when none is set).
        let known = entry
            .and_then(|m| m.max_output_tokens)
            .or_else(|| self.catalog.prices.max_output_tokens(reference));
        Ok(match p {
            Provider::OpenAi(p) => Arc::new(
                openai::OpenAiModel::new(p.clone(), reference, name, settings, stream)
                    .with_max_output(Some(known.unwrap_or(self.default_max_output()))),
            ),
            Provider::Anthropic(p) => Arc::new(
                anthropic::AnthropicModel::new(p.clone(), reference, name, settings, stream)
                    .with_max_output(Some(known.unwrap_or(anthropic::DEFAULT_MAX_TOKENS))),
            ),
        })
    }

    /// The agents file's `default_max_output_tokens`.
    fn default_max_output(&self) -> u32 {
        match self.catalog.default_max_output_tokens {
            0 => crate::catalog::DEFAULT_MAX_OUTPUT_TOKENS,
            n => n,
        }
    }
}
