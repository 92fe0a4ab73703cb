//! Budgets and fallback models as the agents file declares them for an
//! agent (a leaf of the catalog; `model::call` enforces them).
//!
//! ```yaml
//! agents:
//!   researcher:
//!     model: openai:gpt-4o
//!     fallbacks: [anthropic:claude-sonnet, local:small]
//!     context_window_fallbacks: [openai:gpt-4.1]
//!     budget: {tokens: 20000, cost: 0.50, on_exhausted: finish}
//! ```
//!
//! `budget` bounds each call of the agent (every frame it runs in, its
//! sub-agents included), inside whatever its caller has left; `tokens`
//! counts input and output tokens, `cost` is in the prices' currency.
//! `on_exhausted` says what the agent does when any budget above one of
//! its model calls has too little left for it, its own or a caller's:
//! `fail` (the default), `finish` (one last call without tools), `ask` (a
//! person is asked to raise the budget by `ask_more`, its limit again
//! when unset). With `finish`, the agent's ordinary calls leave
//! `finish_reserve` tokens in every budget above them, so the last answer
//! has room.

use serde::Deserialize;

use super::{error::CatalogError, names::parse_model_ref};

/// What an agent does when a budget has too little left for its next
/// model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnExhausted {
    /// The run fails with `RESOURCE_EXHAUSTED` naming the budget.
    #[default]
    Fail,
    /// One last call without tools, told to answer from what it has.
    Finish,
    /// A person is asked (an approval) to raise the budget; denied or
    /// unanswered, `fail`.
    Ask,
}

impl OnExhausted {
    /// Its name in the agents file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::Finish => "finish",
            Self::Ask => "ask",
        }
    }
}

/// A raise asked of a person: tokens and/or cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Amount {
    /// Tokens (input and output).
    pub tokens: Option<u64>,
    /// Cost, in the prices' currency.
    pub cost: Option<f64>,
}

/// An agent's `budget`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetSpec {
    /// Most tokens (input and output) of each call of the agent.
    pub tokens: Option<u64>,
    /// Most cost of each call of the agent, in the prices' currency.
    pub cost: Option<f64>,
    /// What the agent does when a budget runs out.
    pub on_exhausted: OnExhausted,
    /// How much more `ask` asks for (unset: the exhausted budget's limit
    /// again).
    pub ask_more: Option<Amount>,
    /// With `finish`: tokens its ordinary calls leave in every budget above
    /// them, for the last answer (default 1000; priced at the dearest
    /// output price for a cost budget).
    pub finish_reserve: Option<u64>,
}

/// The reserve of `finish` when the agents file sets none.
pub const FINISH_RESERVE: u64 = 1000;

/// Why a budget's number is refused: `field` is its path.
pub fn check_amount(field: &str, tokens: Option<u64>, cost: Option<f64>) -> Result<(), String> {
    if tokens == Some(0) {
        return Err(format!("{field}.tokens: must be at least 1"));
    }
    if let Some(c) = cost
        && !(c.is_finite() && c > 0.0)
    {
        return Err(format!(
            "{field}.cost: {c} is not a positive amount of the prices' currency"
        ));
    }
    Ok(())
}

/// A cost in billionths of the currency.
pub fn cost_nanos(cost: f64) -> u64 {
    (cost * 1e9).round().min(u64::MAX as f64) as u64
}

impl BudgetSpec {
    /// Checks `agents.<agent>.budget`.
    pub fn validate(&self, agent: &str) -> Result<(), CatalogError> {
        let field = format!("agents.{agent}.budget");
        check_amount(&field, self.tokens, self.cost).map_err(CatalogError::Budget)?;
        if self.finish_reserve == Some(0) {
            return Err(CatalogError::Budget(format!(
                "{field}.finish_reserve: must be at least 1"
            )));
        }
        if let Some(more) = &self.ask_more {
            check_amount(&format!("{field}.ask_more"), more.tokens, more.cost)
                .map_err(CatalogError::Budget)?;
        }
        Ok(())
    }
}

/// Checks an agent's fallback lists: model references, no repeats, not its
/// own model; `known` says whether a reference names a configured model.
pub fn check_fallbacks(
    agent: &str,
    model: &str,
    lists: [(&str, &[String]); 2],
    known: &dyn Fn(&str) -> Result<(), String>,
) -> Result<(), CatalogError> {
    for (list, refs) in lists {
        let field = format!("agents.{agent}.{list}");
        for (i, r) in refs.iter().enumerate() {
            parse_model_ref(r).map_err(|e| CatalogError::Budget(format!("{field}[{i}]: {e}")))?;
            known(r).map_err(|e| CatalogError::Budget(format!("{field}[{i}]: {e}")))?;
            if r == model {
                return Err(CatalogError::Budget(format!(
                    "{field}[{i}]: {r:?} is the agent's own model"
                )));
            }
            if refs[..i].contains(r) {
                return Err(CatalogError::Budget(format!(
                    "{field}[{i}]: {r:?} is listed twice"
                )));
            }
        }
    }
    if !(lists[0].1.is_empty() && lists[1].1.is_empty()) && model.is_empty() {
        return Err(CatalogError::Budget(format!(
            "agents.{agent}.fallbacks: an agent with fallbacks names its own model"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_refuse_zero_negative_and_not_a_number() {
        assert!(check_amount("b", Some(1), Some(0.000_001)).is_ok());
        assert_eq!(
            check_amount("b", Some(0), None).expect_err("refused"),
            "b.tokens: must be at least 1"
        );
        for bad in [-1.0, 0.0, f64::NAN, f64::INFINITY] {
            let e = check_amount("agents.a.budget", None, Some(bad)).expect_err("refused");
            assert!(e.starts_with("agents.a.budget.cost: "), "{e}");
        }
        assert_eq!(cost_nanos(0.5), 500_000_000);
    }

    #[test]
    fn fallbacks_name_other_known_models_once() {
        let known = |r: &str| {
            if r.starts_with("nope:") {
                Err(format!("{r:?}: unknown provider \"nope\""))
            } else {
                Ok(())
            }
        };
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = list(&["b:y", "c:z"]);
        assert!(
            check_fallbacks(
                "a",
                "a:x",
                [("fallbacks", &ok), ("context_window_fallbacks", &[])],
                &known
            )
            .is_ok()
        );
        for (bad, says) in [
            (
                list(&["b:y", "nope:z"]),
                "agents.a.fallbacks[1]: \"nope:z\": unknown provider",
            ),
            (
                list(&["a:x"]),
                "agents.a.fallbacks[0]: \"a:x\" is the agent's own model",
            ),
            (
                list(&["b:y", "b:y"]),
                "agents.a.fallbacks[1]: \"b:y\" is listed twice",
            ),
            (
                list(&["noref"]),
                "agents.a.fallbacks[0]: \"noref\" is not provider:model",
            ),
        ] {
            let e = check_fallbacks(
                "a",
                "a:x",
                [("fallbacks", &bad), ("context_window_fallbacks", &[])],
                &known,
            )
            .expect_err("refused")
            .to_string();
            assert!(e.starts_with(says), "{e}");
        }
        let e = check_fallbacks(
            "a",
            "",
            [("fallbacks", &ok), ("context_window_fallbacks", &[])],
            &known,
        )
        .expect_err("refused")
        .to_string();
        assert!(e.contains("names its own model"), "{e}");
    }
}
