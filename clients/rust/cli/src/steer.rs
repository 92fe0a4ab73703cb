//! What `baton run` and `baton pipeline` may change about a run's models:
//! `--model` (the model of agents that name none), `--max-turns`,
//! `--max-depth` (how deep agents may call agents), `--timeout` (the whole
//! run's deadline), `--budget-tokens` and `--budget-cost` (what the whole
//! run may spend) and `--set key=value` generation
//! settings, sent as the request's `settings` (over every agent's and
//! provider's own; the server checks the values and names a bad one).

use anyhow::{Context, bail};
use baton_client::pb;
use clap::Args;

/// The run-steering flags.
#[derive(Args, Default)]
pub struct Steer {
    /// The model of agents that name none, `provider:model` (e.g.
    /// `local:smollm2`).
    #[arg(long)]
    model: Option<String>,
    /// Most model turns per agent context.
    #[arg(long)]
    max_turns: Option<u32>,
    /// How deep agents may call agents (root is 0): a call that would go
    /// deeper fails as a tool error the model sees. The request's
    /// `limits.max_depth`, `max_depth` in the Python client, `maxDepth` in
    /// TypeScript; default: the server's `runs.max_depth` (4).
    #[arg(long, value_name = "N")]
    max_depth: Option<u32>,
    /// Deadline of the whole run (`90s`, `5m`).
    #[arg(long, value_parser = baton_common::config::duration::parse)]
    timeout: Option<std::time::Duration>,
    /// Most tokens (input and output) the whole run may spend on models,
    /// its sub-agents included (`limits.budget.tokens`).
    #[arg(long, value_name = "N")]
    budget_tokens: Option<u64>,
    /// Most the whole run may spend on models, in the prices' currency
    /// (`limits.budget.cost`, e.g. `0.25`).
    #[arg(long, value_name = "AMOUNT")]
    budget_cost: Option<f64>,
    /// A generation setting, `key=value`; repeatable. Keys: temperature,
    /// top_p, max_tokens, seed, stop (repeat for several), tool_choice
    /// (auto, none, required or a tool name), parallel_tool_calls
    /// (true/false), response_format (a JSON Schema, or @file with one),
    /// response_retries, extra.<field> (a provider-specific body field; the
    /// value is JSON, or else a string).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

impl Steer {
    /// The request's default model, limits and settings.
    pub fn apply(
        &self,
    ) -> anyhow::Result<(
        String,
        Option<pb::RunLimits>,
        Option<pb::GenerationSettings>,
    )> {
        let budget =
            (self.budget_tokens.is_some() || self.budget_cost.is_some()).then_some(pb::Budget {
                tokens: self.budget_tokens,
                cost: self.budget_cost,
            });
        let set = self.max_turns.is_some()
            || self.timeout.is_some()
            || self.max_depth.is_some()
            || budget.is_some();
        let limits = set.then(|| pb::RunLimits {
            max_depth: self.max_depth,
            max_turns: self.max_turns.unwrap_or(0),
            run_timeout: self.timeout.map(|t| baton_client::wkt::Duration {
                seconds: t.as_secs() as i64,
                nanos: t.subsec_nanos() as i32,
            }),
            budget,
            ..Default::default()
        });
        let settings = if self.set.is_empty() {
            None
        } else {
            Some(settings(&self.set)?)
        };
        Ok((self.model.clone().unwrap_or_default(), limits, settings))
    }
}

/// `key=value` pairs as generation settings.
pub fn settings(pairs: &[String]) -> anyhow::Result<pb::GenerationSettings> {
    let mut s = pb::GenerationSettings::default();
    let mut extra = serde_json::Map::new();
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("--set {pair:?}: expected key=value"))?;
        let number = |what: &str| -> anyhow::Result<f64> {
            value
                .parse()
                .with_context(|| format!("--set {key}: {value:?} is not {what}"))
        };
        match key {
            "temperature" => s.temperature = Some(number("a number")?),
            "top_p" => s.top_p = Some(number("a number")?),
            "max_tokens" => {
                s.max_tokens = Some(value.parse().with_context(|| {
                    format!("--set max_tokens: {value:?} is not a whole number")
                })?)
            }
            "seed" => {
                s.seed = Some(
                    value
                        .parse()
                        .with_context(|| format!("--set seed: {value:?} is not an integer"))?,
                )
            }
            "stop" => s.stop.push(value.to_owned()),
            "tool_choice" => s.tool_choice = value.to_owned(),
            "parallel_tool_calls" => {
                s.parallel_tool_calls = Some(value.parse().with_context(|| {
                    format!("--set parallel_tool_calls: {value:?} is not true or false")
                })?)
            }
            "response_format" => {
                let schema = match value.strip_prefix('@') {
                    Some(path) => std::fs::read_to_string(path)
                        .with_context(|| format!("--set response_format: cannot read {path}"))?,
                    None => value.to_owned(),
                };
                s.response_format
                    .get_or_insert_with(Default::default)
                    .schema_json = schema;
            }
            "response_retries" => {
                s.response_format
                    .get_or_insert_with(Default::default)
                    .retries = value.parse().with_context(|| {
                    format!("--set response_retries: {value:?} is not a whole number")
                })?
            }
            k if k.starts_with("extra.") && k.len() > "extra.".len() => {
                let v = serde_json::from_str(value)
                    .unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
                extra.insert(k["extra.".len()..].to_owned(), v);
            }
            other => bail!(
                "--set {other}: unknown setting (temperature, top_p, max_tokens, seed, stop, tool_choice, parallel_tool_calls, response_format, response_retries, extra.<field>)"
            ),
        }
    }
    if s.response_format
        .as_ref()
        .is_some_and(|f| f.schema_json.is_empty())
    {
        bail!("--set response_retries needs --set response_format=<schema>");
    }
    if !extra.is_empty() {
        s.extra_body_json = serde_json::Value::Object(extra).to_string();
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_become_settings() {
        let s = settings(&[
            "temperature=0.5".into(),
            "max_tokens=12".into(),
            "stop=a".into(),
            "stop=b".into(),
            "tool_choice=required".into(),
            "parallel_tool_calls=false".into(),
            "extra.logit_bias={\"1\": -100}".into(),
            "extra.user=me".into(),
            "response_format={\"type\":\"object\"}".into(),
            "response_retries=2".into(),
        ])
        .expect("valid");
        assert_eq!(s.temperature, Some(0.5));
        assert_eq!(s.max_tokens, Some(12));
        assert_eq!(s.stop, ["a", "b"]);
        assert_eq!(s.parallel_tool_calls, Some(false));
        let extra: serde_json::Value = serde_json::from_str(&s.extra_body_json).expect("json");
        assert_eq!(extra["logit_bias"]["1"], -100);
        assert_eq!(extra["user"], "me");
        assert_eq!(s.response_format.map(|f| f.retries), Some(2));
        for bad in [
            "temperature=hot",
            "nope=1",
            "max_tokens",
            "response_retries=1",
        ] {
            assert!(settings(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
