//! The Redis keys of one tenant's trace.
//!
//! Key layout (`p` is `redis.key_prefix`): `p:{<trace>}:…` for the tenant
//! `""` (authentication off; the layout of releases before tenants, so such
//! deployments keep their slots) and `p:{<tenant>/<trace>}:…` for a named
//! tenant. Tenant names are `[a-z0-9_-]` and trace ids hex, so no key of one
//! tenant can be a key of another. All keys of a trace carry one hash tag,
//! so a script touches one Cluster slot. The Watch channel is `…:watch`
//! under the same base.

use crate::key::{Key, Scope};

/// The names of one trace's keys (`lua/prelude.lua` describes each).
pub(super) struct TraceKeys {
    /// Hash: the trace's revision counter and the bytes of its live slots.
    pub(super) meta: String,
    /// Sorted set: every slot's key by its expiry.
    pub(super) exp: String,
    /// Hash: every slot's size and version, kept past the slot's own
    /// expiry so purging it releases its quota exactly.
    pub(super) info: String,
    /// The prefix of every slot's hash.
    pub(super) slot_prefix: String,
    /// The Watch channel.
    pub(super) channel: String,
}

impl TraceKeys {
    /// The keys of `scope` under the key prefix `prefix`.
    pub(super) fn new(prefix: &str, scope: &Scope) -> Self {
        let base = if scope.tenant.as_str().is_empty() {
            format!("{prefix}:{{{}}}:", scope.trace_id)
        } else {
            format!("{prefix}:{{{}/{}}}:", scope.tenant, scope.trace_id)
        };
        Self {
            meta: format!("{base}meta"),
            exp: format!("{base}exp"),
            info: format!("{base}info"),
            slot_prefix: format!("{base}s:"),
            channel: format!("{base}watch"),
        }
    }

    /// The hash of the slot `key`.
    pub(super) fn slot(&self, key: &Key) -> String {
        format!("{}{}", self.slot_prefix, key.as_str())
    }
}
