//! What a budget bounds.

/// Tokens and/or cost (in billionths of the prices' currency); `None`: no
/// bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// Input and output tokens.
    pub tokens: Option<u64>,
    /// Cost.
    pub cost_nanos: Option<u64>,
}

impl Limit {
    /// Whether it bounds anything.
    pub fn is_some(&self) -> bool {
        self.tokens.is_some() || self.cost_nanos.is_some()
    }
}
