//! The ledger of a tenant's slots: what a [`Ledger`] counts for each slot
//! ([`Entry`]), a reservation and its undo, and a refusal. Two ledgers
//! implement it: in this process (`memory_ledger`) and in Redis
//! (`redis_ledger`).

use baton_store::error::Result;

use super::config::StoreQuota;

/// A slot as the ledger counts it: its size and expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    /// The value's size in bytes.
    pub(super) size: u64,
    /// When the slot expires, in Unix milliseconds.
    pub(super) expires_ms: u64,
    /// Which reservation wrote it (an undo only undoes its own).
    pub(super) nonce: u64,
}

/// What a reservation replaced, to give it back.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reservation {
    /// What the ledger counted for the slot before, if anything.
    pub(super) previous: Option<Entry>,
    /// The reservation's own nonce (its [`Entry::nonce`]).
    pub(super) nonce: u64,
}

/// Why a reservation was refused: the quota (`bytes`, `keys`) and what the
/// tenant would hold.
pub(super) struct Refusal {
    /// `bytes` or `keys`.
    pub(super) quota: &'static str,
    /// What the tenant would hold with the write.
    pub(super) would_be: u64,
}

/// The totals of a tenant after a ledger change.
pub(super) type Totals = (u64, u64);

/// Where a tenant's slots are counted.
#[async_trait::async_trait]
pub(super) trait Ledger: Send + Sync {
    /// Counts `entry` for the slot `member` of `tenant` in place of what
    /// it counted, unless that takes the tenant over `limits`.
    async fn reserve(
        &self,
        tenant: &str,
        member: &str,
        entry: Entry,
        limits: &StoreQuota,
    ) -> Result<std::result::Result<(Reservation, Totals), Refusal>>;
    /// Gives a reservation of `member` back (if nothing replaced it since).
    async fn undo(&self, tenant: &str, member: &str, r: Reservation) -> Result<()>;
    /// Stops counting `members` (deleted).
    async fn forget(&self, tenant: &str, members: &[String]) -> Result<Totals>;
    /// Stops counting every slot of `trace` (cleared).
    async fn forget_trace(&self, tenant: &str, trace: &str) -> Result<Totals>;
}
