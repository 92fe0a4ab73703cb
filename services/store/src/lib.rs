//! Baton's context-store core: trace-scoped key/value slots with TTLs,
//! size limits, quotas and versions, behind one trait with two backends.
//! The context-store server (`baton-context-store`) serves it over gRPC;
//! the orchestrator uses it in process (`baton up`, memory mode), over
//! gRPC through its own implementation of the trait, and for the Redis
//! connections of its durable runs. Neither depends on the other: both
//! depend on this crate.
//!
//! How the modules fit:
//!
//! - [`ContextStore`] (here): the trait every backend implements.
//! - The types it speaks, each in the module of its noun and re-exported
//!   here: [`key`] (a slot's [`Key`] in a tenant's trace, its [`Scope`]),
//!   [`slot`] (a [`Put`], what it [`Written`], a [`Slot`] read back),
//!   [`page`] (a [`Listing`] one [`Page`] at a time, the [`PageToken`]),
//!   [`batch`] (a batched delete's [`Selection`], what it [`Removed`]),
//!   [`change`] (what Watch reports), [`limits`] (the store's [`Limits`]
//!   and the per-call checks every backend runs before it writes).
//! - [`error`]: the store's one error type. Each error carries its gRPC
//!   code and converts into a `tonic::Status` (the only mapping there is),
//!   because every user of the store reports its errors over gRPC.
//! - [`memory`]: the in-memory backend (`baton up`, tests, one replica).
//! - [`redis`]: the Redis backend (single node or Cluster), with its Lua
//!   scripts, its config and the connection code that the orchestrator's
//!   durable runs share ([`redis::conn`]).
//! - `conformance` (feature `testsuite`): the one suite every backend must
//!   pass; test crates enable it, the services are built without it.
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

pub mod batch;
pub mod change;
#[cfg(feature = "testsuite")]
pub mod conformance;
pub mod error;
pub mod key;
pub mod limits;
pub mod memory;
pub mod page;
pub mod redis;
pub mod slot;

use std::time::Duration;

pub use batch::{MAX_BATCH, Removed, Selection};
pub use change::{Change, ChangeKind, ChangeStream};
pub use error::{Error, Result};
pub use key::{Key, Scope, parse_trace_id, validate_key_chars};
pub use limits::{Limits, LimitsError};
pub use page::{DEFAULT_PAGE_SIZE, Listing, MAX_PAGE_SIZE, Page, PageToken};
pub use slot::{DEFAULT_CONTENT_TYPE, MAX_CONTENT_TYPE_LEN, Put, Slot, SlotMeta, Written, now_ms};

/// How long a trace's revision counter and expiry bookkeeping outlive its
/// last slot.
pub const TRACE_RETENTION: Duration = Duration::from_secs(3600);

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
