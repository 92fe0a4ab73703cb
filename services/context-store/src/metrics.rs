//! The context store's Prometheus metrics (served on
//! `telemetry.metrics_listen`, see `baton_common::metrics`).
//!
//! | metric | labels |
//! |---|---|
//! | `baton_store_operations_total` | `op` (Put, Get, List, Delete, Clear, Watch), `code` (the gRPC code, `OK` on success) |
//! | `baton_store_operation_duration_seconds` | `op` |
//! | `baton_store_quota_rejections_total` | `field` (value, key: the request field a size or quota refused) |
//! | `baton_store_backend_errors_total` | `op` (the backend — Redis — failed or was unreachable) |
//! | `baton_store_watches_active` | |
//! | `baton_store_tenant_bytes`, `baton_store_tenant_keys` | `tenant` (tenants with a store quota; see `crate::quota`) |
//! | `baton_store_tenant_quota_refusals_total` | `tenant`, `quota` (bytes, keys) |

use std::sync::Arc;

use prometheus_client::{
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use baton_common::metrics::{Histograms, Labels, latency_histograms};

/// Every metric of one store instance.
pub struct Metrics {
    /// What `/metrics` serves.
    pub registry: Arc<Registry>,
    operations: Family<Labels, Counter>,
    latency: Histograms,
    quota_rejections: Family<Labels, Counter>,
    backend_errors: Family<Labels, Counter>,
    /// Open watches.
    pub watches: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric in a fresh registry.
    pub fn new() -> Self {
        Self::with_tenants(&crate::quota::TenantMetrics::default())
    }

    /// Every metric, the per-tenant ones of `tenants` too.
    pub fn with_tenants(tenants: &crate::quota::TenantMetrics) -> Self {
        let mut r = Registry::default();
        r.register(
            "baton_store_tenant_bytes",
            "Bytes of a tenant's live slots (tenants with a store quota)",
            tenants.bytes.clone(),
        );
        r.register(
            "baton_store_tenant_keys",
            "Live slots of a tenant (tenants with a store quota)",
            tenants.keys.clone(),
        );
        r.register(
            "baton_store_tenant_quota_refusals",
            "Writes refused by a tenant quota, by tenant and quota",
            tenants.refusals.clone(),
        );
        let operations = Family::<Labels, Counter>::default();
        let latency = latency_histograms();
        let quota_rejections = Family::<Labels, Counter>::default();
        let backend_errors = Family::<Labels, Counter>::default();
        let watches = Gauge::default();
        r.register(
            "baton_store_operations",
            "Store RPCs by method and gRPC code",
            operations.clone(),
        );
        r.register(
            "baton_store_operation_duration_seconds",
            "Latency of store RPCs (a watch: until it is set up)",
            latency.clone(),
        );
        r.register(
            "baton_store_quota_rejections",
            "Writes refused by a size limit or a trace quota, by request field",
            quota_rejections.clone(),
        );
        r.register(
            "baton_store_backend_errors",
            "Calls that failed because the backend (Redis) failed or was unreachable",
            backend_errors.clone(),
        );
        r.register(
            "baton_store_watches_active",
            "Open watches",
            watches.clone(),
        );
        Self {
            registry: Arc::new(r),
            operations,
            latency,
            quota_rejections,
            backend_errors,
            watches,
        }
    }

    /// One call of `op` ended with `code` after `seconds`; `field` is the
    /// request field an error names.
    pub fn observe(&self, op: &'static str, code: tonic::Code, field: Option<&str>, seconds: f64) {
        self.operations
            .get_or_create(&vec![
                ("op", op.to_owned()),
                ("code", baton_common::metrics::code_name(code).to_owned()),
            ])
            .inc();
        self.latency
            .get_or_create(&vec![("op", op.to_owned())])
            .observe(seconds);
        match code {
            tonic::Code::ResourceExhausted => {
                // A batch's `entries[12].value` counts as `value`: the label
                // stays bounded.
                let field = field.map(|f| f.rsplit_once("].").map_or(f, |(_, f)| f));
                self.quota_rejections
                    .get_or_create(&vec![("field", field.unwrap_or("").to_owned())])
                    .inc();
            }
            tonic::Code::Unavailable | tonic::Code::Internal => {
                self.backend_errors
                    .get_or_create(&vec![("op", op.to_owned())])
                    .inc();
            }
            _ => {}
        }
    }
}
