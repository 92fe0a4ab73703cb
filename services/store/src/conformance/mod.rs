//! The conformance suite every [`ContextStore`] backend must pass.
//!
//! Each case is a public async function that takes a store built with
//! [`limits()`] and panics on a violation; the end-to-end crate runs every
//! case against the in-memory store, a real `redis-server` and a real Redis
//! Cluster (`tests/tests/conformance.rs`). [`conformance_cases!`] is the one
//! list of them.
//!
//! The cases are grouped by what they check, one module each: [`slots`]
//! (writes, reads, versions, deletes, clears), [`listing`], [`bounds`]
//! (value size, quotas, TTLs), [`watch`], [`isolation`] (traces and
//! tenants) and [`batch`]; [`support`] holds what they share.

pub mod batch;
pub mod bounds;
pub mod isolation;
pub mod listing;
pub mod slots;
pub mod support;
pub mod watch;

use std::{future::Future, pin::Pin, sync::Arc};

// Every case at `conformance::<case>`, where `conformance_cases!` names it.
pub use batch::*;
pub use bounds::*;
pub use isolation::*;
pub use listing::*;
pub use slots::*;
pub use support::limits;
pub use watch::*;

use crate::ContextStore;

/// A boxed conformance case.
pub type Case = fn(Arc<dyn ContextStore>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Expands `$m!(case, case, …)` with the name of every case: the one list of
/// cases. [`CASES`] is built from it, and test crates use it to generate one
/// test per case per backend, so no backend can skip a case.
#[macro_export]
macro_rules! conformance_cases {
    ($m:ident) => {
        $m!(
            put_get_roundtrip,
            versions_are_trace_revisions,
            overwrite_keeps_quota_exact,
            compare_and_swap,
            concurrent_cas_writers_one_wins_per_version,
            missing_slots_are_not_found,
            list_by_prefix_sorted_with_usage,
            list_pages_in_byte_order,
            value_limit_at_and_over,
            byte_quota_at_and_over,
            key_quota_at_and_over,
            ttl_bounds,
            ttl_expiry_releases_quota,
            clear_removes_everything,
            watch_delivers_changes_in_order,
            watch_filters_by_prefix,
            watch_reports_expiry,
            traces_are_isolated,
            tenants_are_isolated,
            put_many_writes_each_entry_as_one_change,
            put_many_is_all_or_nothing,
            delete_many_by_keys_and_by_prefix,
        );
    };
}

macro_rules! cases_table {
    ($($name:ident),* $(,)?) => {
        /// Every case, by name.
        pub const CASES: &[(&str, Case)] = &[
            $((stringify!($name), |s| Box::pin($name(s)))),*
        ];
    };
}

conformance_cases!(cases_table);
