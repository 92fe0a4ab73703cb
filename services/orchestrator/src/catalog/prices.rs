//! Model prices, and what a model call cost.
//!
//! The agents file prices models by reference, per million tokens:
//!
//! ```yaml
//! prices:
//!   openai:gpt-4o: {input: 2.50, output: 10.00, cached_input: 1.25, currency: USD}
//! prices_file: model_prices_and_context_window.json
//! ```
//!
//! `prices_file` (relative to the agents file) is LiteLLM's model price map
//! (`model_prices_and_context_window.json`): entries by model name, in
//! USD per token (`input_cost_per_token`, `output_cost_per_token`,
//! `cache_read_input_token_cost`). A model `provider:model` takes its
//! price from `prices` first, then from the file's entry `model`, then
//! `provider/model`. The file's `sample_spec` and entries that price no
//! tokens (images, metadata only) are skipped; a cost field that is not a
//! number is refused, naming the entry.
//!
//! Decided here: one currency for every price (the file's is USD), so a
//! run's cost is one sum; cached input is priced at `cached_input` when
//! set, else at `input`; a provider's cache *writes* (Anthropic's) are
//! priced as input. A model without a price costs nothing here: its calls
//! count as unpriced, and no cost is invented for them.

use std::{
    collections::{BTreeMap, HashMap},
    path::Path,
};

use serde::Deserialize;
use serde_json::Value;

use super::names::parse_model_ref;

/// A model's price as the agents file writes it: per million tokens.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceSpec {
    /// Per million prompt tokens.
    pub input: f64,
    /// Per million completion tokens.
    pub output: f64,
    /// Per million prompt tokens read from the provider's cache (unset:
    /// `input`).
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// An ISO 4217 code (`USD`, the default).
    #[serde(default)]
    pub currency: Option<String>,
}

/// A price, in billionths of the currency per token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    input: f64,
    output: f64,
    cached_input: f64,
}

impl Price {
    /// From prices per million tokens.
    fn per_million(input: f64, output: f64, cached_input: Option<f64>) -> Self {
        // 1e9 nanos / 1e6 tokens.
        Self {
            input: input * 1e3,
            output: output * 1e3,
            cached_input: cached_input.unwrap_or(input) * 1e3,
        }
    }

    /// From prices per token.
    fn per_token(input: f64, output: f64, cached_input: Option<f64>) -> Self {
        Self::per_million(input * 1e6, output * 1e6, cached_input.map(|c| c * 1e6))
    }

    /// The dearer of two prices, part by part (a budget's worst case over
    /// the models a call may go to).
    pub fn max(self, other: &Self) -> Self {
        Self {
            input: self.input.max(other.input),
            output: self.output.max(other.output),
            cached_input: self.cached_input.max(other.cached_input),
        }
    }

    /// The most output tokens `nanos` pay for (any number when output is
    /// free).
    pub fn output_tokens_within(&self, nanos: u64) -> u64 {
        if self.output <= 0.0 {
            return u64::MAX;
        }
        (nanos as f64 / self.output).floor().min(u64::MAX as f64) as u64
    }

    /// What a call of `input` prompt tokens (`cached` of them read from
    /// the provider's cache) and `output` completion tokens cost, in
    /// billionths of the currency.
    pub fn cost_nanos(&self, input: u64, cached: u64, output: u64) -> u64 {
        let cached = cached.min(input);
        let fresh = input - cached;
        let cost = fresh as f64 * self.input
            + cached as f64 * self.cached_input
            + output as f64 * self.output;
        cost.round() as u64
    }
}

/// Every price the agents file gives, and its currency.
#[derive(Debug, Clone, Default)]
pub struct Prices {
    /// The prices' currency (`USD` when none is set).
    pub currency: String,
    by_reference: BTreeMap<String, Price>,
    from_file: HashMap<String, Price>,
    /// The prices file's `max_output_tokens` (else `max_tokens`) by model.
    output_limits: HashMap<String, u32>,
}

impl Prices {
    /// The prices of `spec` (the agents file's `prices`) and of the file
    /// `file` names (`prices_file`, relative to `dir`); the error names
    /// the field.
    pub fn new(
        spec: &BTreeMap<String, PriceSpec>,
        file: Option<&str>,
        dir: &Path,
    ) -> Result<Self, String> {
        let mut currency: Option<(String, String)> = None;
        let mut by_reference = BTreeMap::new();
        for (reference, p) in spec {
            let field = |f: &str| format!("prices.{reference:?}.{f}");
            parse_model_ref(reference).map_err(|e| format!("prices.{reference:?}: {e}"))?;
            for (f, v) in [
                ("input", Some(p.input)),
                ("output", Some(p.output)),
                ("cached_input", p.cached_input),
            ] {
                if let Some(v) = v
                    && !(v.is_finite() && v >= 0.0)
                {
                    return Err(format!(
                        "{}: must be a number of 0 or more, not {v}",
                        field(f)
                    ));
                }
            }
            let code = p.currency.clone().unwrap_or_else(|| "USD".to_owned());
            if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
                return Err(format!(
                    "{}: {code:?} is not a currency code (three capital letters, as USD)",
                    field("currency")
                ));
            }
            match &currency {
                Some((first, of)) if *first != code => {
                    return Err(format!(
                        "{}: every price is in one currency, and {of} is in {first}, not {code}",
                        field("currency")
                    ));
                }
                Some(_) => {}
                None => currency = Some((code, format!("prices.{reference:?}"))),
            }
            by_reference.insert(
                reference.clone(),
                Price::per_million(p.input, p.output, p.cached_input),
            );
        }
        let (from_file, output_limits) = match file {
            Some(name) => {
                if let Some((first, of)) = &currency
                    && first != "USD"
                {
                    return Err(format!(
                        "prices_file: its prices are in USD, and {of} is in {first}: every price is in one currency"
                    ));
                }
                let path = dir.join(name);
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("prices_file: cannot read {}: {e}", path.display()))?;
                currency.get_or_insert(("USD".to_owned(), "prices_file".to_owned()));
                read_litellm(&text).map_err(|e| format!("prices_file {}: {e}", path.display()))?
            }
            None => Default::default(),
        };
        Ok(Self {
            currency: currency.map_or_else(|| "USD".to_owned(), |(c, _)| c),
            by_reference,
            from_file,
            output_limits,
        })
    }

    /// The most output tokens model `reference` writes in one answer, as
    /// the prices file says (by model, then `provider/model`).
    pub fn max_output_tokens(&self, reference: &str) -> Option<u32> {
        if self.output_limits.is_empty() {
            return None;
        }
        let (provider, model) = reference.split_once(':')?;
        self.output_limits
            .get(model)
            .or_else(|| self.output_limits.get(&format!("{provider}/{model}")))
            .copied()
    }

    /// The price of model `reference` (`provider:model`), if it has one.
    pub fn of(&self, reference: &str) -> Option<&Price> {
        if let Some(p) = self.by_reference.get(reference) {
            return Some(p);
        }
        if self.from_file.is_empty() {
            return None;
        }
        let (provider, model) = reference.split_once(':')?;
        self.from_file
            .get(model)
            .or_else(|| self.from_file.get(&format!("{provider}/{model}")))
    }
}

/// LiteLLM's model price map: its entries that price tokens, and the
/// output limits it gives (`max_output_tokens`, else the older
/// `max_tokens`, which LiteLLM documents as the same).
type FileEntries = (HashMap<String, Price>, HashMap<String, u32>);

fn read_litellm(text: &str) -> Result<FileEntries, String> {
    let map: serde_json::Map<String, Value> =
        serde_json::from_str(text).map_err(|e| format!("is not a JSON object of models: {e}"))?;
    let mut prices = HashMap::new();
    let mut limits = HashMap::new();
    for (model, entry) in &map {
        if model == "sample_spec" {
            continue;
        }
        let Some(entry) = entry.as_object() else {
            continue;
        };
        let number = |f: &str| -> Result<Option<f64>, String> {
            match entry.get(f) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .map(Some)
                    .ok_or_else(|| format!("{model:?}.{f}: {v} is not a number of 0 or more")),
            }
        };
        let (input, output) = (
            number("input_cost_per_token")?,
            number("output_cost_per_token")?,
        );
        let cached = number("cache_read_input_token_cost")?;
        if let (Some(input), Some(output)) = (input, output) {
            prices.insert(model.clone(), Price::per_token(input, output, cached));
        }
        let limit = number("max_output_tokens")?.or(number("max_tokens")?);
        if let Some(l) = limit.filter(|l| *l >= 1.0) {
            limits.insert(model.clone(), l.min(f64::from(u32::MAX)) as u32);
        }
    }
    Ok((prices, limits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> BTreeMap<String, PriceSpec> {
        serde_norway::from_str(yaml).expect("prices")
    }

    #[test]
    fn a_call_costs_its_tokens_at_their_prices() {
        let prices = Prices::new(
            &spec("openai:gpt-4o: {input: 2.5, output: 10, cached_input: 1.25}\nscripted:a: {input: 1, output: 2}"),
            None,
            Path::new("."),
        )
        .expect("valid");
        let p = prices.of("openai:gpt-4o").expect("priced");
        // 1,000 fresh at 2.5/M, 1,000 cached at 1.25/M, 500 out at 10/M:
        // 0.0025 + 0.00125 + 0.005 = 0.00875.
        assert_eq!(p.cost_nanos(2_000, 1_000, 500), 8_750_000);
        // Cached input without its own price is input.
        let a = prices.of("scripted:a").expect("priced");
        assert_eq!(a.cost_nanos(10, 4, 3), 10_000 + 6_000);
        assert!(
            prices.of("openai:gpt-5").is_none(),
            "no price: none invented"
        );
        assert_eq!(prices.currency, "USD");
    }

    #[test]
    fn litellms_price_map_reads_by_model_then_provider_slash_model() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join("prices.json"),
            r#"{
              "sample_spec": {"input_cost_per_token": "set me", "mode": "chat"},
              "gpt-4o": {"input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05, "cache_read_input_token_cost": 1.25e-06, "litellm_provider": "openai", "max_tokens": 128000, "max_output_tokens": 16384},
              "openrouter/llama": {"input_cost_per_token": 1e-07, "output_cost_per_token": 2e-07},
              "dall-e-3": {"output_cost_per_image": 0.04},
              "metadata-only": {"max_tokens": 8192}
            }"#,
        )
        .expect("write");
        let prices = Prices::new(
            &spec("scripted:x: {input: 3, output: 4}"),
            Some("prices.json"),
            dir.path(),
        )
        .expect("valid");
        let p = prices.of("openai:gpt-4o").expect("by model name");
        assert_eq!(p.cost_nanos(2_000, 1_000, 500), 8_750_000);
        assert!(prices.of("openrouter:llama").is_some(), "by provider/model");
        assert!(prices.of("openai:dall-e-3").is_none());
        // Output limits: max_output_tokens, else max_tokens.
        assert_eq!(prices.max_output_tokens("openai:metadata-only"), Some(8192));
        assert_eq!(prices.max_output_tokens("openai:gpt-4o"), Some(16384));
        assert_eq!(prices.max_output_tokens("openrouter:llama"), None);
        assert!(prices.of("scripted:x").is_some());
    }

    #[test]
    fn a_bad_price_or_prices_file_is_refused_naming_the_field() {
        let dir = tempfile::tempdir().expect("dir");
        let err = |yaml: &str, file: Option<&str>| {
            Prices::new(&spec(yaml), file, dir.path()).expect_err("refused")
        };
        assert!(
            serde_norway::from_str::<BTreeMap<String, PriceSpec>>(
                "scripted:a: {input: lots, output: 1}"
            )
            .expect_err("not a number")
            .to_string()
            .contains("input"),
        );
        assert!(
            err("scripted:a: {input: -1, output: 1}", None)
                .starts_with("prices.\"scripted:a\".input: must be a number of 0 or more")
        );
        assert!(
            err("scripted:a: {input: 1, output: 1, currency: dollars}", None)
                .contains("prices.\"scripted:a\".currency")
        );
        assert!(err("scripted:a: {input: 1, output: 1}\nscripted:b: {input: 1, output: 1, currency: EUR}", None)
            .contains("every price is in one currency"));
        assert!(err("nocolon: {input: 1, output: 1}", None).starts_with("prices.\"nocolon\""));
        assert!(err("{}", Some("missing.json")).starts_with("prices_file: cannot read"));
        std::fs::write(dir.path().join("bad.json"), "[1, 2]").expect("write");
        assert!(err("{}", Some("bad.json")).contains("is not a JSON object of models"));
        std::fs::write(
            dir.path().join("nan.json"),
            r#"{"m": {"input_cost_per_token": "free", "output_cost_per_token": 1}}"#,
        )
        .expect("write");
        assert!(err("{}", Some("nan.json")).contains("\"m\".input_cost_per_token"));
        // At the edge: a price of 0 is a price.
        let zero = Prices::new(&spec("scripted:a: {input: 0, output: 0}"), None, dir.path())
            .expect("valid");
        assert_eq!(
            zero.of("scripted:a").map(|p| p.cost_nanos(5, 0, 5)),
            Some(0)
        );
    }
}
