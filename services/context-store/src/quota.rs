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

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex},
};

use baton_common::quota::{Limits, Quotas, exceeded};
use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
use redis::Script;
use serde::{Deserialize, Serialize};

use crate::{
    error::{Error, Result},
    store::{
        ChangeStream, ContextStore, Key, Limits as StoreLimits, Listing, Page, Put, Removed, Scope,
        Selection, Slot, Written, now_ms, redis::RedisConfig, redis_conn::Connection,
    },
};

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

/// A slot as the ledger counts it: its size and expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    size: u64,
    expires_ms: u64,
    /// Which reservation wrote it (an undo only undoes its own).
    nonce: u64,
}

/// What a reservation replaced, to give it back.
#[derive(Debug, Clone, Copy)]
struct Reservation {
    previous: Option<Entry>,
    nonce: u64,
}

/// Why a reservation was refused: the quota (`bytes`, `keys`) and what the
/// tenant would hold.
struct Refusal {
    quota: &'static str,
    would_be: u64,
}

/// The totals of a tenant after a ledger change.
type Totals = (u64, u64);

/// Where a tenant's slots are counted.
#[async_trait::async_trait]
trait Ledger: Send + Sync {
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
    /// tenant has a store quota.
    pub fn wrap(
        inner: Arc<dyn ContextStore>,
        config: &StoreQuotaConfig,
        redis: Option<&RedisConfig>,
        metrics: TenantMetrics,
    ) -> Result<Arc<dyn ContextStore>, String> {
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

/// One tenant's ledger in this process.
#[derive(Default)]
struct MemoryTenant {
    entries: HashMap<String, Entry>,
    by_expiry: BTreeSet<(u64, String)>,
    traces: HashMap<String, HashSet<String>>,
    bytes: u64,
}

impl MemoryTenant {
    fn remove(&mut self, member: &str) -> Option<Entry> {
        let e = self.entries.remove(member)?;
        self.by_expiry.remove(&(e.expires_ms, member.to_owned()));
        self.bytes -= e.size;
        if let Some((trace, _)) = member.split_once('/')
            && let Some(keys) = self.traces.get_mut(trace)
        {
            keys.remove(member);
            if keys.is_empty() {
                self.traces.remove(trace);
            }
        }
        Some(e)
    }

    fn insert(&mut self, member: &str, e: Entry) {
        self.remove(member);
        self.entries.insert(member.to_owned(), e);
        self.by_expiry.insert((e.expires_ms, member.to_owned()));
        self.bytes += e.size;
        if let Some((trace, _)) = member.split_once('/') {
            self.traces
                .entry(trace.to_owned())
                .or_default()
                .insert(member.to_owned());
        }
    }

    /// Drops the slots whose TTL ran out.
    fn purge(&mut self, now: u64) {
        while let Some((exp, m)) = self.by_expiry.first().cloned() {
            if exp >= now {
                break;
            }
            self.remove(&m);
        }
    }

    fn totals(&self) -> Totals {
        (self.bytes, self.entries.len() as u64)
    }
}

/// The ledger of the memory backend.
#[derive(Default)]
struct MemoryLedger(Mutex<HashMap<String, MemoryTenant>>);

impl MemoryLedger {
    fn with<R>(&self, tenant: &str, f: impl FnOnce(&mut MemoryTenant) -> R) -> R {
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let t = all.entry(tenant.to_owned()).or_default();
        t.purge(now_ms());
        f(t)
    }
}

#[async_trait::async_trait]
impl Ledger for MemoryLedger {
    async fn reserve(
        &self,
        tenant: &str,
        member: &str,
        entry: Entry,
        limits: &StoreQuota,
    ) -> Result<std::result::Result<(Reservation, Totals), Refusal>> {
        Ok(self.with(tenant, |t| {
            let previous = t.entries.get(member).copied();
            let old = previous.map_or(0, |e| e.size);
            let bytes = t.bytes - old + entry.size;
            if limits.bytes.is_some_and(|l| bytes > l) && entry.size > old {
                return Err(Refusal {
                    quota: "bytes",
                    would_be: bytes,
                });
            }
            let keys = t.entries.len() as u64 + u64::from(previous.is_none());
            if previous.is_none() && limits.keys.is_some_and(|l| keys > l) {
                return Err(Refusal {
                    quota: "keys",
                    would_be: keys,
                });
            }
            t.insert(member, entry);
            Ok((
                Reservation {
                    previous,
                    nonce: entry.nonce,
                },
                t.totals(),
            ))
        }))
    }

    async fn undo(&self, tenant: &str, member: &str, r: Reservation) -> Result<()> {
        self.with(tenant, |t| {
            if t.entries.get(member).is_some_and(|e| e.nonce == r.nonce) {
                match r.previous {
                    Some(p) => t.insert(member, p),
                    None => {
                        t.remove(member);
                    }
                }
            }
        });
        Ok(())
    }

    async fn forget(&self, tenant: &str, members: &[String]) -> Result<Totals> {
        Ok(self.with(tenant, |t| {
            for m in members {
                t.remove(m);
            }
            t.totals()
        }))
    }

    async fn forget_trace(&self, tenant: &str, trace: &str) -> Result<Totals> {
        Ok(self.with(tenant, |t| {
            for m in t.traces.get(trace).cloned().unwrap_or_default() {
                t.remove(&m);
            }
            t.totals()
        }))
    }
}

/// Shared by the ledger scripts. Keys of a tenant (Q = `p:q:{t<hex>}`):
/// `Q:e` hash member → "size:expiry:nonce", `Q:x` zset member by expiry,
/// `Q:n` hash bytes/keys, `Q:t:<trace>` set of the trace's members.
const LEDGER_PRELUDE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local E, X, N, Q = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local function parse(v)
  local size, exp, nonce = string.match(v, '^(%d+):(%d+):(%d+)$')
  return tonumber(size), tonumber(exp), nonce
end
local function trace_set(member)
  return Q .. ':t:' .. string.match(member, '^([^/]*)/')
end
local function remove(member)
  local v = redis.call('HGET', E, member)
  if not v then
    return
  end
  local size = parse(v)
  redis.call('HDEL', E, member)
  redis.call('ZREM', X, member)
  redis.call('SREM', trace_set(member), member)
  redis.call('HINCRBY', N, 'bytes', -size)
  redis.call('HINCRBY', N, 'keys', -1)
end
local function insert(member, v)
  remove(member)
  local size, exp = parse(v)
  redis.call('HSET', E, member, v)
  redis.call('ZADD', X, exp, member)
  local ts = trace_set(member)
  redis.call('SADD', ts, member)
  redis.call('HINCRBY', N, 'bytes', size)
  redis.call('HINCRBY', N, 'keys', 1)
  for _, k in ipairs({E, X, N, ts}) do
    if redis.call('PEXPIRETIME', k) < exp + 3600000 then
      redis.call('PEXPIREAT', k, exp + 3600000)
    end
  end
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', X, '-inf', '(' .. now)) do
  remove(m)
end
local function totals()
  local n = redis.call('HMGET', N, 'bytes', 'keys')
  return tonumber(n[1] or '0'), tonumber(n[2] or '0')
end
";

const RESERVE: &str = r"
-- ARGV: Q, member, size, ttl ms, nonce, max bytes (-1: none), max keys (-1: none)
local member, size = ARGV[2], tonumber(ARGV[3])
local previous = redis.call('HGET', E, member)
local old = 0
if previous then
  old = parse(previous)
end
local bytes, keys = totals()
bytes = bytes - old + size
if tonumber(ARGV[6]) >= 0 and bytes > tonumber(ARGV[6]) and size > old then
  return {1, bytes}
end
if not previous then
  keys = keys + 1
  if tonumber(ARGV[7]) >= 0 and keys > tonumber(ARGV[7]) then
    return {2, keys}
  end
end
insert(member, string.format('%d:%d:%s', size, now + tonumber(ARGV[4]), ARGV[5]))
local b, k = totals()
return {0, b, k, previous or ''}
";

const UNDO: &str = r"
-- ARGV: Q, member, nonce, previous ('' : none)
local v = redis.call('HGET', E, ARGV[2])
if v then
  local _, _, nonce = parse(v)
  if nonce == ARGV[3] then
    if ARGV[4] == '' then
      remove(ARGV[2])
    else
      insert(ARGV[2], ARGV[4])
    end
  end
end
return 0
";

const FORGET: &str = r"
-- ARGV: Q, members... ; or with KEYS[4] a trace's set: all of its members
local members = {}
if KEYS[4] then
  members = redis.call('SMEMBERS', KEYS[4])
else
  for i = 2, #ARGV do
    members[#members + 1] = ARGV[i]
  end
end
for _, m in ipairs(members) do
  remove(m)
end
local b, k = totals()
return {b, k}
";

/// The ledger of the Redis backend, in the same Redis.
struct RedisLedger {
    conn: Connection,
    prefix: String,
    reserve: Script,
    undo: Script,
    forget: Script,
}

impl RedisLedger {
    fn new(config: &RedisConfig) -> Result<Self, String> {
        Ok(Self {
            conn: Connection::open(config).map_err(|e| e.to_string())?,
            prefix: config.key_prefix.clone(),
            reserve: Script::new(&format!("{LEDGER_PRELUDE}{RESERVE}")),
            undo: Script::new(&format!("{LEDGER_PRELUDE}{UNDO}")),
            forget: Script::new(&format!("{LEDGER_PRELUDE}{FORGET}")),
        })
    }

    /// The key base of `tenant`'s ledger.
    fn base(&self, tenant: &str) -> String {
        let hex: String = tenant.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}:q:{{t{hex}}}", self.prefix)
    }

    fn invocation<'a>(&self, script: &'a Script, tenant: &str) -> redis::ScriptInvocation<'a> {
        let q = self.base(tenant);
        let mut inv = script.prepare_invoke();
        inv.key(format!("{q}:e"))
            .key(format!("{q}:x"))
            .key(format!("{q}:n"))
            .arg(q);
        inv
    }
}

fn redis_error(e: redis::RedisError) -> Error {
    Error::Unavailable(format!("tenant quota ledger: redis: {e}"))
}

fn encode(e: &Entry) -> String {
    format!("{}:{}:{}", e.size, e.expires_ms, e.nonce)
}

fn decode(v: &str) -> Option<Entry> {
    let mut parts = v.split(':').map(str::parse::<u64>);
    Some(Entry {
        size: parts.next()?.ok()?,
        expires_ms: parts.next()?.ok()?,
        nonce: parts.next()?.ok()?,
    })
}

#[async_trait::async_trait]
impl Ledger for RedisLedger {
    async fn reserve(
        &self,
        tenant: &str,
        member: &str,
        entry: Entry,
        limits: &StoreQuota,
    ) -> Result<std::result::Result<(Reservation, Totals), Refusal>> {
        let ttl = entry.expires_ms.saturating_sub(now_ms());
        let limit = |l: Option<u64>| l.map_or(-1, |n| n.min(i64::MAX as u64) as i64);
        let mut inv = self.invocation(&self.reserve, tenant);
        inv.arg(member)
            .arg(entry.size)
            .arg(ttl)
            .arg(entry.nonce)
            .arg(limit(limits.bytes))
            .arg(limit(limits.keys));
        let mut c = self.conn.get().await?;
        let reply: Vec<redis::Value> = inv.invoke_async(&mut c).await.map_err(redis_error)?;
        let int = |i: usize| match reply.get(i) {
            Some(redis::Value::Int(n)) => *n as u64,
            _ => 0,
        };
        Ok(match int(0) {
            0 => {
                let previous = match reply.get(3) {
                    Some(redis::Value::BulkString(b)) => decode(&String::from_utf8_lossy(b)),
                    _ => None,
                };
                Ok((
                    Reservation {
                        previous,
                        nonce: entry.nonce,
                    },
                    (int(1), int(2)),
                ))
            }
            1 => Err(Refusal {
                quota: "bytes",
                would_be: int(1),
            }),
            _ => Err(Refusal {
                quota: "keys",
                would_be: int(1),
            }),
        })
    }

    async fn undo(&self, tenant: &str, member: &str, r: Reservation) -> Result<()> {
        let mut inv = self.invocation(&self.undo, tenant);
        inv.arg(member)
            .arg(r.nonce)
            .arg(r.previous.as_ref().map(encode).unwrap_or_default());
        let mut c = self.conn.get().await?;
        inv.invoke_async::<i64>(&mut c).await.map_err(redis_error)?;
        Ok(())
    }

    async fn forget(&self, tenant: &str, members: &[String]) -> Result<Totals> {
        let mut inv = self.invocation(&self.forget, tenant);
        for m in members {
            inv.arg(m);
        }
        let mut c = self.conn.get().await?;
        inv.invoke_async(&mut c).await.map_err(redis_error)
    }

    async fn forget_trace(&self, tenant: &str, trace: &str) -> Result<Totals> {
        let mut inv = self.invocation(&self.forget, tenant);
        inv.key(format!("{}:t:{trace}", self.base(tenant)));
        let mut c = self.conn.get().await?;
        inv.invoke_async(&mut c).await.map_err(redis_error)
    }
}
