//! What Watch reports: one [`Change`] per put, delete, expiry or clear of a
//! trace's slots, as a [`ChangeStream`].

use std::pin::Pin;

use futures::Stream;

use crate::error::Result;

/// What a change did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// A slot was written.
    Put,
    /// A slot was deleted.
    Deleted,
    /// A slot expired.
    Expired,
    /// The trace was cleared.
    Cleared,
}

/// One change to a trace's slots, as Watch reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// What happened.
    pub kind: ChangeKind,
    /// The slot's key; empty for `Cleared`.
    pub key: String,
    /// The trace revision of the change (for `Expired`, the slot's version).
    pub version: u64,
    /// The new value's size (puts only).
    pub size_bytes: u64,
    /// The new value's media type (puts only).
    pub content_type: String,
    /// When the slot expires, in Unix milliseconds (puts only).
    pub expires_at_ms: u64,
}

impl Change {
    /// Whether a watcher of `prefix` wants this change.
    pub fn matches(&self, prefix: &str) -> bool {
        self.kind == ChangeKind::Cleared || self.key.starts_with(prefix)
    }
}

/// A stream of changes; it ends with an error when the watch breaks.
pub type ChangeStream = Pin<Box<dyn Stream<Item = Result<Change>> + Send>>;
