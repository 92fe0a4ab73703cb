//! The `quotas` section of the store's config: one tenant's store limits
//! ([`StoreQuota`]) under `quotas.default` and `quotas.tenants.<name>`.

use baton_common::quota::{Limits, Quotas};
use serde::{Deserialize, Serialize};

/// One tenant's store limits (unset: the default's, or no limit).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreQuota {
    /// Bytes of values across all the tenant's live slots.
    pub bytes: Option<u64>,
    /// Live slots across all the tenant's traces.
    pub keys: Option<u64>,
}

impl Limits for StoreQuota {
    fn over(&self, under: &Self) -> Self {
        Self {
            bytes: self.bytes.or(under.bytes),
            keys: self.keys.or(under.keys),
        }
    }
}

/// The quotas section of the store's config.
pub type StoreQuotaConfig = Quotas<StoreQuota>;
