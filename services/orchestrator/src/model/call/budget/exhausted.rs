//! What a budget with too little left for a call says.

use super::limit::Limit;

/// A budget with too little left for a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted {
    /// The node: `run`, or `agent <name> in <context>`.
    pub budget: String,
    /// Its limit.
    pub limit: Limit,
    /// What it spent.
    pub spent_tokens: u64,
    /// What it spent.
    pub spent_cost: u64,
    /// What calls in flight hold of it.
    pub reserved_tokens: u64,
    /// What calls in flight hold of it.
    pub reserved_cost: u64,
    /// The least the call needs: its input and one output token.
    pub needed_tokens: u64,
    /// The least the call needs, priced.
    pub needed_cost: u64,
    /// A cost budget and a model without a price.
    pub unpriced: Option<String>,
    pub(super) node: usize,
}

impl Exhausted {
    /// The message a failed run carries, in `currency`.
    pub fn describe(&self, currency: &str) -> String {
        if let Some(model) = &self.unpriced {
            return format!(
                "budget {}: model {model} has no price, so a cost limit cannot bound it (give it a price, or set a token budget only)",
                self.budget
            );
        }
        let mut parts = Vec::new();
        if let Some(t) = self.limit.tokens {
            parts.push(format!(
                "{} of {t} tokens spent{}, the next model call needs at least {}",
                self.spent_tokens,
                held(self.reserved_tokens, ""),
                self.needed_tokens
            ));
        }
        if let Some(c) = self.limit.cost_nanos {
            parts.push(format!(
                "{} of {} {currency} spent{}, the next model call needs at least {}",
                money(self.spent_cost),
                money(c),
                held(self.reserved_cost, currency),
                money(self.needed_cost)
            ));
        }
        format!("budget {} exhausted: {}", self.budget, parts.join("; "))
    }

    /// The budget's node (to raise it).
    pub fn node(&self) -> usize {
        self.node
    }
}

fn held(n: u64, currency: &str) -> String {
    match (n, currency) {
        (0, _) => String::new(),
        (n, "") => format!(" ({n} more held by calls in flight)"),
        (n, c) => format!(" ({} {c} more held by calls in flight)", money(n)),
    }
}

/// Billionths of a currency, as a decimal with up to 6 places.
pub fn money(nanos: u64) -> String {
    let s = format!("{:.6}", nanos as f64 / 1e9);
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_owned()
}
