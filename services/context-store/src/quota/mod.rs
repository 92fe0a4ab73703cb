//! Per-tenant quotas of the store (`quotas.default`, `quotas.tenants.<name>`):
//! bytes and keys across all of a tenant's traces, beside the per-trace
//! limits (`limits.max_trace_bytes`, `max_trace_keys`).
//!
//! [`TenantQuotas`] wraps a backend: a write first reserves its slot in the
//! tenant's ledger (refused with `RESOURCE_EXHAUSTED` naming `quotas.bytes`
//! or `quotas.keys`, nothing written), then writes; a write the backend
//! refuses gives the reservation back; deletes and clears leave the ledger
//! after the backend. The ledger keeps every slot of the tenant with its
//! size and expiry, and drops slots whose TTL ran out when it is next
//! touched, so usage follows expiries without a sweeper.
//!
//! The ledger is where the slots are: in this process for the memory
//! backend, in Redis for the Redis backend (shared by every store replica;
//! keys `p:q:{t<hex tenant>}:…`, one hash tag per tenant). The ledger and
//! the slots are apart (another Redis Cluster slot), so a writer that dies
//! between the two, or a write and a delete of one key racing, can leave
//! the count off by that slot until its TTL ends it — never longer.
//!
//! Only tenants with a store quota are counted (a ledger write is one more
//! Redis call per write); usage is counted from when the quota is set.
//! Metrics per tenant: `baton_store_tenant_bytes`, `baton_store_tenant_keys`
//! (the ledger's totals as of this replica's last write of the tenant) and
//! `baton_store_tenant_quota_refusals_total` (`tenant`, `quota`).

mod config;
mod ledger;
mod memory_ledger;
mod redis_ledger;

use std::sync::Arc;

use baton_common::quota::exceeded;
use baton_store::{
    ContextStore,
    batch::{Removed, Selection},
    change::ChangeStream,
    error::{Error, Result},
    key::{Key, Scope},
    limits::Limits as StoreLimits,
    page::{Listing, Page},
    redis::config::RedisConfig,
    slot::{Put, Slot, Written, now_ms},
};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};

pub use self::config::{StoreQuota, StoreQuotaConfig};
use self::{
    ledger::{Entry, Ledger, Reservation, Totals},
    memory_ledger::MemoryLedger,
    redis_ledger::RedisLedger,
};

/// The per-tenant metrics.
#[derive(Clone, Default)]
pub struct TenantMetrics {
    /// Bytes of the tenant's live slots.
    pub bytes: Family<Vec<(&'static str, String)>, Gauge>,
    /// The tenant's live slots.
    pub keys: Family<Vec<(&'static str, String)>, Gauge>,
    /// Writes refused by a tenant quota.
    pub refusals: Family<Vec<(&'static str, String)>, Counter>,
}

fn member(scope: &Scope, key: &str) -> String {
    format!("{}/{key}", scope.trace_id)
}

/// A backend whose writes are held to per-tenant quotas (see the module
/// docs).
pub struct TenantQuotas {
    inner: Arc<dyn ContextStore>,
    config: StoreQuotaConfig,
    ledger: Box<dyn Ledger>,
    metrics: TenantMetrics,
    nonce: std::sync::atomic::AtomicU64,
}

impl TenantQuotas {
    /// `inner` held to `config`, counted in this process (memory backend)
    /// or in the Redis of `redis` (Redis backend); `inner` itself when no
    /// tenant has a store quota. Fails only on a Redis config the client
    /// refuses (the ledger connects lazily).
    pub fn wrap(
        inner: Arc<dyn ContextStore>,
        config: &StoreQuotaConfig,
        redis: Option<&RedisConfig>,
        metrics: TenantMetrics,
    ) -> Result<Arc<dyn ContextStore>> {
        if !config.any(|q| q.bytes.is_some() || q.keys.is_some()) {
            return Ok(inner);
        }
        let ledger: Box<dyn Ledger> = match redis {
            Some(r) => Box::new(RedisLedger::new(r)?),
            None => Box::new(MemoryLedger::default()),
        };
        Ok(Arc::new(Self {
            inner,
            config: config.clone(),
            ledger,
            metrics,
            nonce: std::sync::atomic::AtomicU64::new(
                (now_ms() << 16) ^ u64::from(std::process::id()),
            ),
        }))
    }

    fn counted(&self, scope: &Scope) -> Option<StoreQuota> {
        let q = self.config.of(scope.tenant.as_str());
        (q.bytes.is_some() || q.keys.is_some()).then_some(q)
    }

    /// Counts `put`'s slot in its tenant's ledger; a refusal is the
    /// `RESOURCE_EXHAUSTED` error naming the quota.
    async fn reserve(
        &self,
        tenant: &str,
        put: &Put,
        limits: &StoreQuota,
    ) -> Result<(String, Reservation, Totals)> {
        let store_limits = self.inner.limits();
        let member = member(&put.scope, put.key.as_str());
        let ttl = put.ttl.unwrap_or(store_limits.default_ttl);
        let entry = Entry {
            size: put.value.len() as u64,
            expires_ms: now_ms() + ttl.as_millis() as u64,
            nonce: self
                .nonce
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        match self.ledger.reserve(tenant, &member, entry, limits).await? {
            Ok((reservation, totals)) => Ok((member, reservation, totals)),
            Err(refusal) => {
                self.metrics
                    .refusals
                    .get_or_create(&vec![
                        ("tenant", tenant.to_owned()),
                        ("quota", refusal.quota.to_owned()),
                    ])
                    .inc();
                let (limit, what) = match refusal.quota {
                    "bytes" => (
                        limits.bytes.unwrap_or_default(),
                        format!("its slots would hold {} bytes", refusal.would_be),
                    ),
                    _ => (
                        limits.keys.unwrap_or_default(),
                        format!("it would have {} slots", refusal.would_be),
                    ),
                };
                Err(Error::Exhausted {
                    field: if refusal.quota == "bytes" {
                        "quotas.bytes"
                    } else {
                        "quotas.keys"
                    },
                    message: exceeded(tenant, limit, &what),
                })
            }
        }
    }

    /// Gives reservations back, latest first, after the backend refused
    /// the write they were for.
    async fn give_back(&self, tenant: &str, reserved: Vec<(String, Reservation)>) {
        for (member, reservation) in reserved.into_iter().rev() {
            if let Err(undo) = self.ledger.undo(tenant, &member, reservation).await {
                tracing::warn!(tenant, error = %undo, "cannot give a quota reservation back; it ends with the slot's TTL");
            }
        }
    }

    fn report(&self, tenant: &str, (bytes, keys): Totals) {
        let label = vec![("tenant", tenant.to_owned())];
        self.metrics
            .bytes
            .get_or_create(&label)
            .set(bytes.min(i64::MAX as u64) as i64);
        self.metrics
            .keys
            .get_or_create(&label)
            .set(keys.min(i64::MAX as u64) as i64);
    }
}

#[async_trait::async_trait]
impl ContextStore for TenantQuotas {
    fn limits(&self) -> &StoreLimits {
        self.inner.limits()
    }

    async fn put(&self, put: Put) -> Result<Written> {
        let Some(limits) = self.counted(&put.scope) else {
            return self.inner.put(put).await;
        };
        // What the backend refuses anyway is refused by it first (naming
        // the request's field), with nothing reserved.
        if self.inner.limits().check_put(&put).is_err() {
            return self.inner.put(put).await;
        }
        let tenant = put.scope.tenant.as_str().to_owned();
        let (member, reservation, totals) = self.reserve(&tenant, &put, &limits).await?;
        match self.inner.put(put).await {
            Ok(written) => {
                self.report(&tenant, totals);
                Ok(written)
            }
            Err(e) => {
                self.give_back(&tenant, vec![(member, reservation)]).await;
                Err(e)
            }
        }
    }

    async fn get(&self, scope: &Scope, key: &Key) -> Result<Slot> {
        self.inner.get(scope, key).await
    }

    async fn list_page(&self, scope: &Scope, prefix: &str, page: &Page) -> Result<Listing> {
        self.inner.list_page(scope, prefix, page).await
    }

    async fn delete(&self, scope: &Scope, key: &Key, expected_version: Option<u64>) -> Result<u64> {
        let revision = self.inner.delete(scope, key, expected_version).await?;
        if self.counted(scope).is_some() {
            let tenant = scope.tenant.as_str();
            match self
                .ledger
                .forget(tenant, &[member(scope, key.as_str())])
                .await
            {
                Ok(totals) => self.report(tenant, totals),
                Err(e) => {
                    tracing::warn!(tenant, error = %e, "cannot count a delete; the slot counts until its TTL ends")
                }
            }
        }
        Ok(revision)
    }

    async fn clear(&self, scope: &Scope) -> Result<u64> {
        let removed = self.inner.clear(scope).await?;
        if self.counted(scope).is_some() {
            let tenant = scope.tenant.as_str();
            match self
                .ledger
                .forget_trace(tenant, &scope.trace_id.to_string())
                .await
            {
                Ok(totals) => self.report(tenant, totals),
                Err(e) => {
                    tracing::warn!(tenant, error = %e, "cannot count a clear; its slots count until their TTL ends")
                }
            }
        }
        Ok(removed)
    }

    async fn put_many(&self, scope: &Scope, puts: Vec<Put>) -> Result<Vec<Written>> {
        let Some(limits) = self.counted(scope) else {
            return self.inner.put_many(scope, puts).await;
        };
        if self.inner.limits().check_batch(scope, &puts).is_err() {
            return self.inner.put_many(scope, puts).await;
        }
        // Entry by entry; a refusal gives back what the batch reserved.
        let tenant = scope.tenant.as_str().to_owned();
        let mut reserved = Vec::with_capacity(puts.len());
        let mut totals = None;
        for (i, put) in puts.iter().enumerate() {
            match self.reserve(&tenant, put, &limits).await {
                Ok((member, reservation, t)) => {
                    reserved.push((member, reservation));
                    totals = Some(t);
                }
                Err(e) => {
                    self.give_back(&tenant, reserved).await;
                    return Err(Error::in_entry(i, put.key.as_str(), e));
                }
            }
        }
        match self.inner.put_many(scope, puts).await {
            Ok(written) => {
                if let Some(totals) = totals {
                    self.report(&tenant, totals);
                }
                Ok(written)
            }
            Err(e) => {
                self.give_back(&tenant, reserved).await;
                Err(e)
            }
        }
    }

    async fn delete_many(&self, scope: &Scope, selection: &Selection) -> Result<Removed> {
        let removed = self.inner.delete_many(scope, selection).await?;
        if self.counted(scope).is_some() && !removed.keys.is_empty() {
            let tenant = scope.tenant.as_str();
            let members: Vec<String> = removed.keys.iter().map(|k| member(scope, k)).collect();
            match self.ledger.forget(tenant, &members).await {
                Ok(totals) => self.report(tenant, totals),
                Err(e) => {
                    tracing::warn!(tenant, error = %e, "cannot count a delete; the slots count until their TTL ends")
                }
            }
        }
        Ok(removed)
    }

    async fn watch(&self, scope: &Scope, prefix: &str) -> Result<ChangeStream> {
        self.inner.watch(scope, prefix).await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}
