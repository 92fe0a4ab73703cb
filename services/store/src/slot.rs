//! A slot as it is written ([`Put`], answered by [`Written`]) and read
//! ([`Slot`], [`SlotMeta`]), and the clock its expiry is measured with
//! ([`now_ms`]).

use std::time::Duration;

use bytes::Bytes;

use crate::key::{Key, Scope};

/// The default content type of a value written without one.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";
/// Longest accepted content type.
pub const MAX_CONTENT_TYPE_LEN: usize = 128;

/// A write of one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put {
    /// The tenant's trace.
    pub scope: Scope,
    /// The key.
    pub key: Key,
    /// The value.
    pub value: Bytes,
    /// The media type; empty means [`DEFAULT_CONTENT_TYPE`].
    pub content_type: String,
    /// The TTL; `None` means the default.
    pub ttl: Option<Duration>,
    /// Compare-and-swap: write only if the slot is at this version (0:
    /// absent).
    pub expected_version: Option<u64>,
}

impl Put {
    /// An unconditional put with the default TTL and content type.
    pub fn new(scope: Scope, key: Key, value: impl Into<Bytes>) -> Self {
        Self {
            scope,
            key,
            value: value.into(),
            content_type: String::new(),
            ttl: None,
            expected_version: None,
        }
    }

    /// The content type to store.
    pub fn effective_content_type(&self) -> &str {
        if self.content_type.is_empty() {
            DEFAULT_CONTENT_TYPE
        } else {
            &self.content_type
        }
    }
}

/// What a put wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The slot's new version.
    pub version: u64,
    /// When it expires, in Unix milliseconds.
    pub expires_at_ms: u64,
}

/// The metadata of a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMeta {
    /// The key.
    pub key: String,
    /// The media type.
    pub content_type: String,
    /// The version.
    pub version: u64,
    /// The value's size in bytes.
    pub size_bytes: u64,
    /// When it expires, in Unix milliseconds.
    pub expires_at_ms: u64,
}

/// A slot read with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The metadata.
    pub meta: SlotMeta,
    /// The value.
    pub value: Bytes,
}

/// The current time in Unix milliseconds: the clock of `expires_at_ms`
/// (the Redis backend corrects it by Redis's own clock for its deadlines).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
