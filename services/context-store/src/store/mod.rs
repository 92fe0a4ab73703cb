//! The storage behind the context store: one trait, two backends.
//!
//! [`ContextStore`] is implemented by [`redis::RedisStore`] (production) and
//! [`memory::MemoryStore`] (the embedded default). Both pass the same
//! conformance suite (`crate::conformance`, feature `testsuite`), so code written against one
//! behaves the same on the other.
//!
//! Semantics both backends share:
//! - A slot is live while `now <= expires_at` (milliseconds, the backend's
//!   clock). Expired slots are invisible to reads at once and are purged
//!   (quota released, `Expired` change published) by the next mutation of
//!   their trace, so quota accounting is exact whenever it is checked.
//! - Versions are trace revisions: each put, delete and clear takes the next
//!   number of the trace's counter. The counter (with the bookkeeping that
//!   reports expiries) is kept for [`TRACE_RETENTION`] past the expiry of the
//!   longest-lived slot the trace had, so a version is not reused while a
//!   client can reasonably still hold it; after that the trace is forgotten.
//! - Limits are checked before anything is written; a rejected call changes
//!   nothing a client can observe.

pub mod memory;
pub mod redis;
pub mod redis_conn;

use std::{pin::Pin, time::Duration};

use baton_common::{auth::Tenant, ids::TraceId};
use bytes::Bytes;
use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How long a trace's revision counter and expiry bookkeeping outlive its
/// last slot.
pub const TRACE_RETENTION: Duration = Duration::from_secs(3600);

/// The default content type of a value written without one.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";
/// Longest accepted content type.
pub const MAX_CONTENT_TYPE_LEN: usize = 128;

/// A validated slot key: 1 to `max_key_len` characters of `[A-Za-z0-9._:/-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// Validates `s` as a key of at most `max_len` characters; errors name
    /// `field`.
    pub fn parse(field: &'static str, s: &str, max_len: usize) -> Result<Self> {
        validate_key_chars(field, s, max_len)?;
        if s.is_empty() {
            return Err(Error::invalid(field, "must not be empty"));
        }
        Ok(Self(s.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Checks a key or key prefix (which may be empty) against the key rules.
pub fn validate_key_chars(field: &'static str, s: &str, max_len: usize) -> Result<()> {
    if s.len() > max_len {
        return Err(Error::invalid(
            field,
            format!("is {} characters long, the limit is {max_len}", s.len()),
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')))
    {
        return Err(Error::invalid(
            field,
            format!("has the character {c:?}; allowed are A-Z a-z 0-9 . _ : / -"),
        ));
    }
    Ok(())
}

/// Parses a trace id; errors name `trace_id`.
pub fn parse_trace_id(s: &str) -> Result<TraceId> {
    TraceId::parse(s).map_err(|e| Error::invalid("trace_id", e.to_string()))
}

/// The store's limits. Every one is configurable; the defaults are the
/// product's (DESIGN.md §6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest value, in bytes (default 1 MiB).
    pub max_value_bytes: u64,
    /// Most bytes of values per trace (default 64 MiB).
    pub max_trace_bytes: u64,
    /// Most live slots per trace (default 4096).
    pub max_trace_keys: u64,
    /// Longest key, in characters (default 256).
    pub max_key_len: usize,
    /// TTL of a put that sets none (default 1 h).
    #[serde(with = "baton_common::config::duration")]
    pub default_ttl: Duration,
    /// Longest TTL a put may set (default 7 days).
    #[serde(with = "baton_common::config::duration")]
    pub max_ttl: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_value_bytes: 1 << 20,
            max_trace_bytes: 64 << 20,
            max_trace_keys: 4096,
            max_key_len: 256,
            default_ttl: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

impl Limits {
    /// Checks the limits are coherent; returns what is wrong otherwise.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.max_value_bytes == 0 || self.max_value_bytes > 512 << 20 {
            return Err(
                "limits.max_value_bytes must be between 1 and 536870912 (Redis' string limit)"
                    .into(),
            );
        }
        if self.max_trace_bytes < self.max_value_bytes {
            return Err("limits.max_trace_bytes must be at least limits.max_value_bytes".into());
        }
        if self.max_trace_keys == 0 {
            return Err("limits.max_trace_keys must be at least 1".into());
        }
        if self.max_key_len == 0 || self.max_key_len > 1024 {
            return Err("limits.max_key_len must be between 1 and 1024".into());
        }
        if self.max_ttl.as_millis() == 0 {
            return Err("limits.max_ttl must be positive".into());
        }
        if self.default_ttl.as_millis() == 0 || self.default_ttl > self.max_ttl {
            return Err("limits.default_ttl must be positive and at most limits.max_ttl".into());
        }
        Ok(())
    }

    /// Validates a put against the per-call limits (value size, TTL, content
    /// type) and resolves its TTL. Quotas are checked by the backend,
    /// atomically with the write.
    pub fn check_put(&self, put: &Put) -> Result<Duration> {
        let size = put.value.len() as u64;
        if size > self.max_value_bytes {
            return Err(Error::ValueTooLarge {
                size,
                limit: self.max_value_bytes,
            });
        }
        validate_content_type(&put.content_type)?;
        match put.ttl {
            None => Ok(self.default_ttl),
            Some(ttl) if ttl.as_millis() == 0 => {
                Err(Error::invalid("ttl", "must be positive (at least 1ms)"))
            }
            Some(ttl) if ttl > self.max_ttl => Err(Error::invalid(
                "ttl",
                format!(
                    "{} is over the maximum of {}",
                    baton_common::config::duration::format(ttl),
                    baton_common::config::duration::format(self.max_ttl)
                ),
            )),
            Some(ttl) => Ok(ttl),
        }
    }
}

fn validate_content_type(ct: &str) -> Result<()> {
    if ct.len() > MAX_CONTENT_TYPE_LEN {
        return Err(Error::invalid(
            "content_type",
            format!(
                "is {} characters long, the limit is {MAX_CONTENT_TYPE_LEN}",
                ct.len()
            ),
        ));
    }
    if let Some(c) = ct.chars().find(|c| !(' '..='~').contains(c)) {
        return Err(Error::invalid(
            "content_type",
            format!("has the character {c:?}; only printable ASCII is allowed"),
        ));
    }
    Ok(())
}

/// The namespace of one trace's slots: a trace of one tenant. The same
/// trace id in two tenants names two disjoint sets of slots (their keys,
/// quotas, revisions and watches are apart); the tenant `""` is the one of
/// every call when authentication is off.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    /// The tenant.
    pub tenant: Tenant,
    /// The trace.
    pub trace_id: TraceId,
}

impl Scope {
    /// The trace `trace_id` of `tenant`.
    pub fn new(tenant: Tenant, trace_id: TraceId) -> Self {
        Self { tenant, trace_id }
    }

    /// The trace `trace_id` of the tenant `""`.
    pub fn of_trace(trace_id: TraceId) -> Self {
        Self::new(Tenant::default(), trace_id)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.tenant.as_str().is_empty() {
            write!(f, "{}", self.trace_id)
        } else {
            write!(f, "{}/{}", self.tenant, self.trace_id)
        }
    }
}

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

/// A trace's slots under a prefix, and the trace's quota usage.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// Matching live slots, sorted by key.
    pub slots: Vec<SlotMeta>,
    /// Bytes the whole trace uses.
    pub used_bytes: u64,
    /// Live slots of the whole trace.
    pub used_keys: u64,
    /// When more matching slots follow: the last key of this page (the next
    /// page starts after it).
    pub next_after: Option<String>,
}

/// Slots in one page of a listing when the caller asks for none.
pub const DEFAULT_PAGE_SIZE: usize = 1000;
/// Most slots in one page; larger requests are coerced to it (AIP-158). A
/// page of slots with the longest keys and content types stays far below
/// the 4 MiB a gRPC client accepts by default.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Which page of a listing to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Only keys after this one (exclusive); `None` from the first.
    pub after: Option<String>,
    /// At most this many slots (1 to [`MAX_PAGE_SIZE`]).
    pub size: usize,
}

impl Default for Page {
    fn default() -> Self {
        Self {
            after: None,
            size: DEFAULT_PAGE_SIZE,
        }
    }
}

/// The opaque `page_token` of `List`: it names the trace and prefix it was
/// issued for and the last key returned, so a token can only continue the
/// listing it came from. Text form: `v1.<trace>.<hex prefix>.<hex key>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageToken {
    /// The trace listed.
    pub trace_id: String,
    /// The prefix listed.
    pub prefix: String,
    /// The last key of the previous page.
    pub after: String,
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

impl PageToken {
    /// The token's text.
    pub fn encode(&self) -> String {
        format!(
            "v1.{}.{}.{}",
            self.trace_id,
            hex(&self.prefix),
            hex(&self.after)
        )
    }

    /// Reads a token of a listing of `trace_id` under `prefix`; `field`
    /// names the request field in errors.
    pub fn decode(
        field: &'static str,
        token: &str,
        trace_id: &TraceId,
        prefix: &str,
    ) -> Result<Self> {
        let bad = || Error::invalid(field, "is not a page token this service issued");
        let mut parts = token.split('.');
        let (Some("v1"), Some(trace), Some(p), Some(after), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        let (prefix_then, after) = (unhex(p).ok_or_else(bad)?, unhex(after).ok_or_else(bad)?);
        if after.is_empty() {
            return Err(bad());
        }
        if trace != trace_id.as_str() || prefix_then != prefix {
            return Err(Error::invalid(
                field,
                "was issued for another trace or prefix; list again from the first page",
            ));
        }
        Ok(Self {
            trace_id: trace.to_owned(),
            prefix: prefix_then,
            after,
        })
    }
}

/// Most entries of one batched write ([`ContextStore::put_many`]) and most
/// keys of one batched delete ([`ContextStore::delete_many`]).
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

impl Limits {
    /// Validates a batched write: 1 to [`MAX_BATCH`] entries of `scope`, each
    /// key once, each entry as [`Limits::check_put`] does; returns each
    /// entry's TTL. Errors name the entry.
    pub fn check_batch(&self, scope: &Scope, puts: &[Put]) -> Result<Vec<Duration>> {
        if puts.is_empty() {
            return Err(Error::invalid("entries", "must not be empty"));
        }
        if puts.len() > MAX_BATCH {
            return Err(Error::invalid(
                "entries",
                format!("{} entries is over the limit of {MAX_BATCH}", puts.len()),
            ));
        }
        let mut seen = std::collections::HashSet::with_capacity(puts.len());
        puts.iter()
            .enumerate()
            .map(|(i, put)| {
                let in_entry = |e| Error::in_entry(i, put.key.as_str(), e);
                if put.scope != *scope {
                    return Err(Error::Internal(format!(
                        "entries[{i}]: a batch of {scope} holds a put of {}",
                        put.scope
                    )));
                }
                if !seen.insert(put.key.as_str()) {
                    return Err(in_entry(Error::invalid(
                        "key",
                        "appears twice in the batch",
                    )));
                }
                self.check_put(put).map_err(in_entry)
            })
            .collect()
    }

    /// Validates a batched delete's selection: 1 to [`MAX_BATCH`] keys, or a
    /// non-empty prefix.
    pub fn check_selection(&self, selection: &Selection) -> Result<()> {
        match selection {
            Selection::Keys(keys) if keys.is_empty() => Err(Error::invalid(
                "keys",
                "set keys or prefix (Clear removes every slot)",
            )),
            Selection::Keys(keys) if keys.len() > MAX_BATCH => Err(Error::invalid(
                "keys",
                format!("{} keys is over the limit of {MAX_BATCH}", keys.len()),
            )),
            Selection::Prefix(p) if p.is_empty() => Err(Error::invalid(
                "prefix",
                "must not be empty (Clear removes every slot)",
            )),
            Selection::Prefix(p) => validate_key_chars("prefix", p, self.max_key_len),
            Selection::Keys(_) => Ok(()),
        }
    }
}

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

/// Trace-scoped key/value slots with TTLs, quotas and versions.
///
/// Inputs are validated types (trace ids, keys); per-call limits and quotas
/// are enforced by the implementation. Every method either does all it says
/// or changes nothing.
#[async_trait::async_trait]
pub trait ContextStore: Send + Sync + 'static {
    /// The limits this store enforces.
    fn limits(&self) -> &Limits;

    /// Writes a slot (a compare-and-swap when `expected_version` is set).
    async fn put(&self, put: Put) -> Result<Written>;

    /// Reads a live slot; `NotFound` when it is absent or expired.
    async fn get(&self, scope: &Scope, key: &Key) -> Result<Slot>;

    /// Lists one page of the live slots whose key starts with `prefix`, in
    /// key order, with the trace's usage.
    async fn list_page(&self, scope: &Scope, prefix: &str, page: &Page) -> Result<Listing>;

    /// Lists every live slot whose key starts with `prefix`, following the
    /// pages (usage as of the last page).
    async fn list(&self, scope: &Scope, prefix: &str) -> Result<Listing> {
        let mut page = Page::default();
        let mut all = Listing::default();
        loop {
            let listing = self.list_page(scope, prefix, &page).await?;
            all.slots.extend(listing.slots);
            all.used_bytes = listing.used_bytes;
            all.used_keys = listing.used_keys;
            match listing.next_after {
                Some(after) => page.after = Some(after),
                None => return Ok(all),
            }
        }
    }

    /// Deletes a live slot (only at `expected_version` when set); returns the
    /// delete's revision.
    async fn delete(&self, scope: &Scope, key: &Key, expected_version: Option<u64>) -> Result<u64>;

    /// Deletes every slot of a trace; returns how many live slots it removed.
    async fn clear(&self, scope: &Scope) -> Result<u64>;

    /// Writes several slots of `scope` (every put's scope), all or none:
    /// every entry is checked — limits, expected versions, and the trace's
    /// quotas for the whole batch — before anything is written. Each entry
    /// then takes its own revision, in order, and is one change for
    /// watchers. Errors name the failing entry ([`Error::in_entry`]).
    async fn put_many(&self, scope: &Scope, puts: Vec<Put>) -> Result<Vec<Written>>;

    /// Removes the selected live slots of `scope` at once; each takes its own
    /// revision and is one change for watchers. Absent keys are skipped.
    async fn delete_many(&self, scope: &Scope, selection: &Selection) -> Result<Removed>;

    /// Streams changes to the trace's slots under `prefix`, starting before
    /// this method returns (a change made after it returns is delivered).
    async fn watch(&self, scope: &Scope, prefix: &str) -> Result<ChangeStream>;

    /// Checks the backend answers; used for readiness.
    async fn ping(&self) -> Result<()>;
}

/// The current time in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod batch_tests {
    use super::*;

    fn puts(scope: &Scope, n: usize) -> Vec<Put> {
        (0..n)
            .map(|i| {
                Put::new(
                    scope.clone(),
                    Key::parse("key", &format!("k{i}"), 256).expect("key"),
                    "v",
                )
            })
            .collect()
    }

    #[test]
    fn a_batch_holds_max_batch_entries_and_keys_not_one_more() {
        let limits = Limits::default();
        let scope = Scope::of_trace(TraceId::random());
        assert_eq!(
            limits
                .check_batch(&scope, &puts(&scope, MAX_BATCH))
                .expect("at the limit")
                .len(),
            MAX_BATCH
        );
        let err = limits
            .check_batch(&scope, &puts(&scope, MAX_BATCH + 1))
            .expect_err("over");
        assert_eq!(err.field().as_deref(), Some("entries"));
        let keys = |n: usize| Selection::Keys(puts(&scope, n).into_iter().map(|p| p.key).collect());
        assert!(limits.check_selection(&keys(MAX_BATCH)).is_ok());
        let err = limits
            .check_selection(&keys(MAX_BATCH + 1))
            .expect_err("over");
        assert_eq!(err.field().as_deref(), Some("keys"));
        let err = limits
            .check_selection(&Selection::Prefix("bad prefix".into()))
            .expect_err("bad");
        assert_eq!(err.field().as_deref(), Some("prefix"));
    }
}
