//! Batched writes and deletes: at most [`MAX_BATCH`] entries, a
//! [`Selection`] of the slots a batched delete removes, and what it
//! [`Removed`].

use crate::key::Key;

/// Most entries of one batched write (`ContextStore::put_many`) and most
/// keys of one batched delete (`ContextStore::delete_many`).
pub const MAX_BATCH: usize = 1000;

/// Which slots a batched delete removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// These keys (absent ones are skipped).
    Keys(Vec<Key>),
    /// Every live slot whose key starts with this (non-empty) prefix.
    Prefix(String),
}

impl Selection {
    /// Whether `key` is selected.
    pub fn selects(&self, key: &str) -> bool {
        match self {
            Self::Keys(keys) => keys.iter().any(|k| k.as_str() == key),
            Self::Prefix(p) => key.starts_with(p.as_str()),
        }
    }
}

/// What a batched delete removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Removed {
    /// How many live slots were removed.
    pub deleted: u64,
    /// Their keys, in the order they were removed, from the backends that
    /// hold the slots (the tenant-quota ledger forgets them); empty through
    /// a remote store, whose answer is the count.
    pub keys: Vec<String>,
    /// The trace revision of the last removal; 0 when nothing was removed.
    pub version: u64,
}
