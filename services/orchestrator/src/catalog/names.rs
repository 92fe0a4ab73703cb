//! Names, model references and durations as the agents file writes them:
//! a leaf every module may use (the catalog, models, pipelines, the gRPC
//! edge), using nothing of the crate.

use std::time::Duration;

/// Whether `s` is a valid agent, group or step name: `[a-z0-9_-]{1,64}`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Splits a model reference `provider:model` (the provider's existence is
/// checked against the agents file by the catalog and the models).
pub fn parse_model_ref(s: &str) -> Result<(&str, &str), String> {
    let (provider, model) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not provider:model"))?;
    if model.is_empty() {
        return Err(format!("{s:?} names no model"));
    }
    if !valid_name(provider) {
        return Err(format!(
            "{s:?}: {provider:?} is not a provider name ([a-z0-9_-]{{1,64}})"
        ));
    }
    Ok((provider, model))
}

/// How long a scripted turn waits before answering, parsed from `500ms` etc.
pub fn parse_delay(s: &str) -> Result<Duration, String> {
    baton_common::config::duration::parse(s).map_err(|e| e.to_string())
}
