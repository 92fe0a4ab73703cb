//! The ledger of the memory backend: every tenant's slots in this process.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::Mutex,
};

use baton_store::{error::Result, slot::now_ms};

use super::{
    config::StoreQuota,
    ledger::{Entry, Ledger, Refusal, Reservation, Totals},
};

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
pub(super) struct MemoryLedger(Mutex<HashMap<String, MemoryTenant>>);

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
