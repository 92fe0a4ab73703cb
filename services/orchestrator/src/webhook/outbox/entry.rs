//! What the outbox hands out and keeps: a held stream, a stream's head,
//! a dead letter (a leaf of `webhook::outbox`).

use serde::{Deserialize, Serialize};

use crate::webhook::delivery::Delivery;

/// A stream this replica holds.
#[derive(Debug, Clone)]
pub struct Claim {
    /// `{run_id}/{sub}`.
    pub stream: String,
    /// This holder's token (its lease key's value).
    pub token: String,
    /// The due score the claim set (removed only if still it).
    pub score: String,
}

/// The head of a stream, as read.
#[derive(Debug, Clone)]
pub struct Head {
    /// Its exact text in the outbox (what a settle compares).
    pub raw: String,
    /// It, read.
    pub delivery: Delivery,
}

/// A dead letter as the list keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dead {
    /// The delivery as it was last tried.
    pub delivery: Delivery,
    /// When it was given up (ms since the epoch).
    pub dead_ms: i64,
}
