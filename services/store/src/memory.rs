//! The in-memory backend: the embedded default of `baton up`, and the
//! reference the Redis backend is checked against.
//!
//! Traces are spread over shards, each a `Mutex<HashMap>`; a call holds one
//! shard's lock for a few map operations and never across an await. Expired
//! slots are purged by the next mutation of their trace, like on Redis, and a
//! sweeper task drops traces nobody touches any more.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex, MutexGuard, Weak},
    time::Duration,
};

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_stream::wrappers::{BroadcastStream, errors::BroadcastStreamRecvError};

use crate::{
    ContextStore, TRACE_RETENTION,
    batch::{Removed, Selection},
    change::{Change, ChangeKind, ChangeStream},
    error::{Error, Result},
    key::{Key, Scope},
    limits::Limits,
    page::{Listing, Page},
    slot::{Put, Slot, SlotMeta, Written, now_ms},
};

const SHARDS: usize = 16;
/// Changes a watcher may fall behind before its stream ends with `ABORTED`.
const WATCH_BUFFER: usize = 1024;
/// How often the sweeper looks for abandoned traces.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct MemSlot {
    value: Bytes,
    content_type: Arc<str>,
    version: u64,
    expires_at_ms: u64,
}

#[derive(Debug, Default)]
struct TraceState {
    revision: u64,
    bytes: u64,
    slots: BTreeMap<String, MemSlot>,
    /// (expires_at_ms, key) of every slot, for purging in expiry order.
    expiries: BTreeSet<(u64, String)>,
    /// The latest expiry any slot of this trace had plus the retention; the
    /// revision counter is kept at least until then.
    keep_until_ms: u64,
    watchers: Option<broadcast::Sender<Change>>,
}

impl TraceState {
    fn publish(&self, change: Change) {
        if let Some(tx) = &self.watchers {
            // No receivers is fine: nobody is watching.
            let _ = tx.send(change);
        }
    }

    /// Removes slots whose TTL ran out, releasing their quota.
    fn purge(&mut self, now: u64) {
        while let Some((expires, _)) = self.expiries.first() {
            if *expires >= now {
                break;
            }
            let Some((_, key)) = self.expiries.pop_first() else {
                break;
            };
            if let Some(slot) = self.slots.remove(&key) {
                self.bytes -= slot.value.len() as u64;
                self.publish(Change {
                    kind: ChangeKind::Expired,
                    key,
                    version: slot.version,
                    size_bytes: 0,
                    content_type: String::new(),
                    expires_at_ms: 0,
                });
            }
        }
    }

    fn live(&self, key: &str, now: u64) -> Option<&MemSlot> {
        self.slots.get(key).filter(|s| s.expires_at_ms >= now)
    }

    fn check_version(&self, key: &str, expected: Option<u64>, now: u64) -> Result<()> {
        if let Some(expected) = expected {
            let current = self.live(key, now).map(|s| s.version);
            if current.unwrap_or(0) != expected {
                return Err(Error::VersionMismatch {
                    key: key.to_owned(),
                    expected,
                    current,
                });
            }
        }
        Ok(())
    }

    /// Writes a checked put: the next revision, its change published.
    fn write(&mut self, put: Put, ttl: Duration, now: u64) -> Written {
        let key = put.key.as_str().to_owned();
        let size = put.value.len() as u64;
        self.revision += 1;
        let version = self.revision;
        let expires_at_ms = now + ttl.as_millis() as u64;
        let content_type: Arc<str> = put.effective_content_type().into();
        let slot = MemSlot {
            value: put.value,
            content_type: content_type.clone(),
            version,
            expires_at_ms,
        };
        if let Some(prev) = self.slots.insert(key.clone(), slot) {
            self.expiries.remove(&(prev.expires_at_ms, key.clone()));
            self.bytes -= prev.value.len() as u64;
        }
        self.bytes += size;
        self.expiries.insert((expires_at_ms, key.clone()));
        self.keep_until_ms = self
            .keep_until_ms
            .max(expires_at_ms + TRACE_RETENTION.as_millis() as u64);
        self.publish(Change {
            kind: ChangeKind::Put,
            key,
            version,
            size_bytes: size,
            content_type: content_type.to_string(),
            expires_at_ms,
        });
        Written {
            version,
            expires_at_ms,
        }
    }

    /// Removes a live slot: the next revision, its change published.
    fn remove(&mut self, key: &str) -> Option<u64> {
        let slot = self.slots.remove(key)?;
        self.expiries.remove(&(slot.expires_at_ms, key.to_owned()));
        self.bytes -= slot.value.len() as u64;
        self.revision += 1;
        self.publish(Change {
            kind: ChangeKind::Deleted,
            key: key.to_owned(),
            version: self.revision,
            size_bytes: 0,
            content_type: String::new(),
            expires_at_ms: 0,
        });
        Some(self.revision)
    }

    fn abandoned(&self, now: u64) -> bool {
        self.slots.is_empty()
            && self.keep_until_ms < now
            && self
                .watchers
                .as_ref()
                .is_none_or(|tx| tx.receiver_count() == 0)
    }
}

struct Shards {
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<Scope, TraceState>>>,
}

impl Shards {
    fn lock(&self, scope: &Scope) -> MutexGuard<'_, HashMap<Scope, TraceState>> {
        let i = (self.hasher.hash_one(scope) as usize) % self.shards.len();
        // A poisoned shard means a panic mid-update; the maps are still
        // structurally sound, so keep serving rather than take the store down.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sweep(&self) {
        let now = now_ms();
        for shard in &self.shards {
            let mut map = shard.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, state| {
                state.purge(now);
                !state.abandoned(now)
            });
        }
    }
}

/// The in-memory context store.
pub struct MemoryStore {
    limits: Limits,
    shards: Arc<Shards>,
}

impl MemoryStore {
    /// A new, empty store. Must be called inside a Tokio runtime: it starts a
    /// sweeper task that ends when the store is dropped.
    pub fn new(limits: Limits) -> Self {
        let shards = Arc::new(Shards {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        });
        let weak: Weak<Shards> = Arc::downgrade(&shards);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(shards) = weak.upgrade() else { return };
                shards.sweep();
            }
        });
        Self { limits, shards }
    }

    /// Runs the sweeper's pass now (tests use it instead of waiting).
    pub fn sweep(&self) {
        self.shards.sweep();
    }

    /// How many traces the store holds state for.
    pub fn trace_count(&self) -> usize {
        self.shards
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }
}

#[async_trait::async_trait]
impl ContextStore for MemoryStore {
    fn limits(&self) -> &Limits {
        &self.limits
    }

    async fn put(&self, put: Put) -> Result<Written> {
        let ttl = self.limits.check_put(&put)?;
        let now = now_ms();
        let size = put.value.len() as u64;
        let mut map = self.shards.lock(&put.scope);
        let state = map.entry(put.scope.clone()).or_default();
        state.purge(now);
        let key = put.key.as_str();
        state.check_version(key, put.expected_version, now)?;

        let old = state.live(key, now);
        let old_size = old.map_or(0, |s| s.value.len() as u64);
        let would_be = state.bytes - old_size + size;
        if would_be > self.limits.max_trace_bytes {
            return Err(Error::TraceBytesQuota {
                trace_id: put.scope.trace_id.to_string(),
                size,
                would_be,
                limit: self.limits.max_trace_bytes,
            });
        }
        if old.is_none() && state.slots.len() as u64 >= self.limits.max_trace_keys {
            return Err(Error::TraceKeysQuota {
                trace_id: put.scope.trace_id.to_string(),
                used: state.slots.len() as u64,
                limit: self.limits.max_trace_keys,
            });
        }

        Ok(state.write(put, ttl, now))
    }

    async fn get(&self, scope: &Scope, key: &Key) -> Result<Slot> {
        let now = now_ms();
        let map = self.shards.lock(scope);
        let slot = map
            .get(scope)
            .and_then(|s| s.live(key.as_str(), now))
            .ok_or_else(|| Error::NotFound {
                trace_id: scope.trace_id.to_string(),
                key: key.as_str().to_owned(),
            })?;
        Ok(Slot {
            meta: SlotMeta {
                key: key.as_str().to_owned(),
                content_type: slot.content_type.to_string(),
                version: slot.version,
                size_bytes: slot.value.len() as u64,
                expires_at_ms: slot.expires_at_ms,
            },
            value: slot.value.clone(),
        })
    }

    async fn list_page(&self, scope: &Scope, prefix: &str, page: &Page) -> Result<Listing> {
        let now = now_ms();
        let map = self.shards.lock(scope);
        let Some(state) = map.get(scope) else {
            return Ok(Listing::default());
        };
        let mut listing = Listing::default();
        for (key, slot) in &state.slots {
            if slot.expires_at_ms < now {
                continue;
            }
            listing.used_bytes += slot.value.len() as u64;
            listing.used_keys += 1;
            let after = page.after.as_deref().is_none_or(|a| key.as_str() > a);
            if after && key.starts_with(prefix) {
                if listing.slots.len() == page.size {
                    listing.next_after = listing.slots.last().map(|s| s.key.clone());
                    continue;
                }
                listing.slots.push(SlotMeta {
                    key: key.clone(),
                    content_type: slot.content_type.to_string(),
                    version: slot.version,
                    size_bytes: slot.value.len() as u64,
                    expires_at_ms: slot.expires_at_ms,
                });
            }
        }
        Ok(listing)
    }

    async fn delete(&self, scope: &Scope, key: &Key, expected_version: Option<u64>) -> Result<u64> {
        let now = now_ms();
        let mut map = self.shards.lock(scope);
        let not_found = || Error::NotFound {
            trace_id: scope.trace_id.to_string(),
            key: key.as_str().to_owned(),
        };
        let state = map.get_mut(scope).ok_or_else(not_found)?;
        state.purge(now);
        if state.live(key.as_str(), now).is_none() {
            return Err(not_found());
        }
        state.check_version(key.as_str(), expected_version, now)?;
        state.remove(key.as_str()).ok_or_else(not_found)
    }

    async fn clear(&self, scope: &Scope) -> Result<u64> {
        let now = now_ms();
        let mut map = self.shards.lock(scope);
        let Some(state) = map.get_mut(scope) else {
            return Ok(0);
        };
        state.purge(now);
        let removed = state.slots.len() as u64;
        state.slots.clear();
        state.expiries.clear();
        state.bytes = 0;
        state.revision += 1;
        let version = state.revision;
        state.publish(Change {
            kind: ChangeKind::Cleared,
            key: String::new(),
            version,
            size_bytes: 0,
            content_type: String::new(),
            expires_at_ms: 0,
        });
        Ok(removed)
    }

    async fn put_many(&self, scope: &Scope, puts: Vec<Put>) -> Result<Vec<Written>> {
        let ttls = self.limits.check_batch(scope, &puts)?;
        let now = now_ms();
        let mut map = self.shards.lock(scope);
        let state = map.entry(scope.clone()).or_default();
        state.purge(now);
        // Everything is checked before anything is written.
        let (mut bytes, mut keys) = (state.bytes, state.slots.len() as u64);
        for (i, put) in puts.iter().enumerate() {
            let key = put.key.as_str();
            let in_entry = |e| Error::in_entry(i, key, e);
            state
                .check_version(key, put.expected_version, now)
                .map_err(in_entry)?;
            let old = state.live(key, now);
            let size = put.value.len() as u64;
            bytes = bytes - old.map_or(0, |s| s.value.len() as u64) + size;
            if bytes > self.limits.max_trace_bytes {
                return Err(in_entry(Error::TraceBytesQuota {
                    trace_id: scope.trace_id.to_string(),
                    size,
                    would_be: bytes,
                    limit: self.limits.max_trace_bytes,
                }));
            }
            if old.is_none() {
                if keys >= self.limits.max_trace_keys {
                    return Err(in_entry(Error::TraceKeysQuota {
                        trace_id: scope.trace_id.to_string(),
                        used: keys,
                        limit: self.limits.max_trace_keys,
                    }));
                }
                keys += 1;
            }
        }
        Ok(puts
            .into_iter()
            .zip(ttls)
            .map(|(put, ttl)| state.write(put, ttl, now))
            .collect())
    }

    async fn delete_many(&self, scope: &Scope, selection: &Selection) -> Result<Removed> {
        self.limits.check_selection(selection)?;
        let now = now_ms();
        let mut map = self.shards.lock(scope);
        let Some(state) = map.get_mut(scope) else {
            return Ok(Removed::default());
        };
        state.purge(now);
        let keys: Vec<String> = match selection {
            Selection::Keys(keys) => keys
                .iter()
                .filter(|k| state.slots.contains_key(k.as_str()))
                .map(|k| k.as_str().to_owned())
                .collect(),
            Selection::Prefix(p) => state
                .slots
                .range(p.clone()..)
                .take_while(|(k, _)| k.starts_with(p.as_str()))
                .map(|(k, _)| k.clone())
                .collect(),
        };
        let mut removed = Removed::default();
        for key in keys {
            // A key listed twice is removed once.
            if let Some(version) = state.remove(&key) {
                removed.version = version;
                removed.deleted += 1;
                removed.keys.push(key);
            }
        }
        Ok(removed)
    }

    async fn watch(&self, scope: &Scope, prefix: &str) -> Result<ChangeStream> {
        let rx = {
            let mut map = self.shards.lock(scope);
            let state = map.entry(scope.clone()).or_default();
            state
                .watchers
                .get_or_insert_with(|| broadcast::channel(WATCH_BUFFER).0)
                .subscribe()
        };
        let prefix = prefix.to_owned();
        let stream = BroadcastStream::new(rx)
            .filter_map(move |item| {
                let out = match item {
                    Ok(change) if change.matches(&prefix) => Some(Ok(change)),
                    Ok(_) => None,
                    Err(BroadcastStreamRecvError::Lagged(missed)) => {
                        Some(Err(Error::WatchLagged { missed }))
                    }
                };
                futures::future::ready(out)
            })
            // A lagged watcher has lost changes: end its stream after the error.
            .scan(false, |ended, item| {
                if *ended {
                    return futures::future::ready(None);
                }
                *ended = item.is_err();
                futures::future::ready(Some(item))
            });
        Ok(Box::pin(stream))
    }

    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}
