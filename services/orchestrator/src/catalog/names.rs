//! Names, model references and durations as the agents file writes them:
//! a leaf every module may use (the catalog, models, pipelines, the gRPC
//! edge), using nothing of the crate.

use std::time::Duration;

use baton_common::config::duration::DurationError;

/// Whether `s` is a valid agent, group or step name: `[a-z0-9_-]{1,64}`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Whether `s` is a name MCP tools may have here: `[a-zA-Z0-9_-]{1,64}`
/// (what model APIs accept as function names).
pub fn valid_mcp_tool_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `scripted` and the configured providers (`names`), comma-separated.
pub fn known_providers<'a>(names: impl Iterator<Item = &'a str>) -> String {
    std::iter::once("scripted")
        .chain(names)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a model reference is not `provider:model`; the message quotes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelRefError {
    /// No `:`.
    #[error("{0:?} is not provider:model")]
    NotProviderModel(String),
    /// Nothing after the `:`.
    #[error("{0:?} names no model")]
    NoModel(String),
    /// What precedes the `:` is not a name.
    #[error("{reference:?}: {provider:?} is not a provider name ([a-z0-9_-]{{1,64}})")]
    ProviderName {
        /// The reference.
        reference: String,
        /// Its provider part.
        provider: String,
    },
}

/// Splits a model reference `provider:model` (the provider's existence is
/// checked against the agents file by the catalog and the models).
pub fn parse_model_ref(s: &str) -> Result<(&str, &str), ModelRefError> {
    let (provider, model) = s
        .split_once(':')
        .ok_or_else(|| ModelRefError::NotProviderModel(s.to_owned()))?;
    if model.is_empty() {
        return Err(ModelRefError::NoModel(s.to_owned()));
    }
    if !valid_name(provider) {
        return Err(ModelRefError::ProviderName {
            reference: s.to_owned(),
            provider: provider.to_owned(),
        });
    }
    Ok((provider, model))
}

/// How long a scripted turn waits before answering, parsed from `500ms` etc.
pub fn parse_delay(s: &str) -> Result<Duration, DurationError> {
    baton_common::config::duration::parse(s)
}
