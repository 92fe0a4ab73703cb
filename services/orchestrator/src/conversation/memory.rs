//! Conversations kept in the process (memory mode): a map under one lock,
//! each operation whole under it. Bounded by `conversations.max_kept` (the
//! least recently used conversation not running is dropped first) and by
//! each conversation's TTL (an expired one is gone when next touched, and
//! swept when a new one is made).

use std::{
    collections::{BTreeMap, HashMap},
    sync::Mutex,
};

use baton_proto::v1 as pb;

use super::store::{Begin, Begun, Finish, Key, Meta, Open, Page, Store, now_ms};
use crate::error::Result;

struct Held {
    meta: Meta,
    running_until: i64,
    messages: Vec<pb::ConversationMessage>,
    runs: Vec<pb::ConversationRun>,
}

impl Held {
    fn expired(&self, now: i64) -> bool {
        self.meta.running.is_empty() && self.meta.updated_ms + self.meta.ttl_ms <= now
    }
}

/// Conversations in this process (see the module docs).
pub struct MemoryStore {
    max_kept: usize,
    held: Mutex<HashMap<Key, Held>>,
}

impl MemoryStore {
    /// A store of at most `max_kept` conversations.
    pub fn new(max_kept: usize) -> Self {
        Self {
            max_kept,
            held: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drops expired conversations, then the least recently used ones not
/// running until there is room for one more.
fn make_room(held: &mut HashMap<Key, Held>, max_kept: usize, now: i64) {
    held.retain(|_, h| !h.expired(now));
    while held.len() >= max_kept {
        let oldest = held
            .iter()
            .filter(|(_, h)| h.meta.running.is_empty())
            .min_by_key(|(_, h)| h.meta.updated_ms)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => {
                held.remove(&k);
            }
            // Every one is running: it may go over, for as long as they run.
            None => break,
        }
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn begin(&self, key: &Key, begin: &Begin) -> Result<Begun> {
        let now = now_ms();
        let mut held = self.lock();
        if held.get(key).is_some_and(|h| h.expired(now)) {
            held.remove(key);
        }
        let created = !held.contains_key(key);
        match (held.get(key), begin.open) {
            (Some(_), Open::New) => return Ok(Begun::Exists),
            (None, Open::Existing) => return Ok(Begun::NotFound),
            (Some(h), _) if !h.meta.running.is_empty() && h.meta.running != begin.run_id => {
                return Ok(Begun::Busy {
                    running: h.meta.running.clone(),
                    lapsed: h.running_until <= now,
                });
            }
            (None, _) => {
                make_room(&mut held, self.max_kept, now);
                let meta = Meta {
                    id: key.id.clone(),
                    created_ms: now,
                    updated_ms: now,
                    count: begin.base.len() as u32,
                    bytes: begin.base.iter().map(super::store::size).sum(),
                    branched_from: begin.branched_from.clone(),
                    ..Default::default()
                };
                held.insert(
                    key.clone(),
                    Held {
                        meta,
                        running_until: 0,
                        messages: begin.base.clone(),
                        runs: Vec::new(),
                    },
                );
            }
            (Some(_), _) => {}
        }
        let h = held.get_mut(key).expect("present: found or just made");
        h.meta.running.clone_from(&begin.run_id);
        h.running_until = now + begin.hold_ms;
        // Used when a run appends to it, not when one takes the turn.
        h.meta.ttl_ms = begin.ttl_ms;
        Ok(Begun::Taken {
            meta: Box::new(h.meta.clone()),
            messages: h.messages.clone(),
            created,
        })
    }

    async fn finish(&self, key: &Key, finish: &Finish) -> Result<bool> {
        let mut held = self.lock();
        let Some(h) = held.get_mut(key) else {
            return Ok(false);
        };
        if h.meta.running != finish.run_id {
            return Ok(false);
        }
        let fold = (finish.fold as usize).min(h.messages.len());
        if fold > 0 {
            h.messages.drain(..fold);
            h.meta.folded += fold as u32;
        }
        if let Some(summary) = &finish.summary {
            h.messages.insert(0, summary.clone());
        }
        h.messages.extend(finish.messages.iter().cloned());
        h.runs.push(finish.run.clone());
        h.meta.running.clear();
        h.running_until = 0;
        h.meta.agent.clone_from(&finish.agent);
        if h.meta.preview.is_empty() {
            h.meta.preview = super::store::preview_of(finish);
        }
        h.meta.count = finish.count;
        h.meta.bytes = finish.bytes;
        h.meta.updated_ms = now_ms();
        h.meta.ttl_ms = finish.ttl_ms;
        Ok(true)
    }

    async fn discard(&self, key: &Key, run_id: &str) -> Result<()> {
        let mut held = self.lock();
        if held.get(key).is_some_and(|h| h.meta.running == run_id) {
            held.remove(key);
        }
        Ok(())
    }

    async fn hold(&self, key: &Key, run_id: &str, hold_ms: i64) -> Result<bool> {
        Ok(match self.lock().get_mut(key) {
            Some(h) if h.meta.running == run_id => {
                h.running_until = now_ms() + hold_ms;
                true
            }
            // The run gave the turn back already (it ended before this):
            // nothing to hold.
            Some(_) => true,
            None => false,
        })
    }

    async fn branches(&self, tenant: &str, id: &str) -> Result<Vec<String>> {
        Ok(self
            .lock()
            .iter()
            .filter(|(k, h)| k.tenant == tenant && h.meta.branched_from == id)
            .map(|(k, _)| k.id.clone())
            .collect())
    }

    async fn release(&self, key: &Key, run_id: &str) -> Result<()> {
        if let Some(h) = self.lock().get_mut(key)
            && h.meta.running == run_id
        {
            h.meta.running.clear();
            h.running_until = 0;
        }
        Ok(())
    }

    async fn page(&self, key: &Key, from: u32, n: u32) -> Result<Option<Page>> {
        let now = now_ms();
        let held = self.lock();
        let Some(h) = held.get(key).filter(|h| !h.expired(now)) else {
            return Ok(None);
        };
        let from = (from as usize).min(h.messages.len());
        let to = (from + n as usize).min(h.messages.len());
        Ok(Some(Page {
            meta: h.meta.clone(),
            messages: h.messages[from..to].to_vec(),
            runs: h.runs.clone(),
        }))
    }

    async fn list(
        &self,
        tenant: &str,
        after: Option<(i64, String)>,
        n: usize,
    ) -> Result<Vec<Meta>> {
        let now = now_ms();
        let held = self.lock();
        let mut all: Vec<&Meta> = held
            .iter()
            .filter(|(k, h)| k.tenant == tenant && !h.expired(now))
            .map(|(_, h)| &h.meta)
            .collect();
        all.sort_by(|a, b| (b.updated_ms, &b.id).cmp(&(a.updated_ms, &a.id)));
        Ok(all
            .into_iter()
            .filter(|m| {
                after
                    .as_ref()
                    .is_none_or(|(t, id)| (m.updated_ms, &m.id) < (*t, id))
            })
            .take(n)
            .cloned()
            .collect())
    }

    async fn update(
        &self,
        key: &Key,
        title: Option<String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Option<Meta>> {
        let now = now_ms();
        let mut held = self.lock();
        let Some(h) = held.get_mut(key).filter(|h| !h.expired(now)) else {
            return Ok(None);
        };
        if let Some(title) = title {
            h.meta.title = title;
        }
        for (k, v) in labels {
            if v.is_empty() {
                h.meta.labels.remove(k);
            } else {
                h.meta.labels.insert(k.clone(), v.clone());
            }
        }
        Ok(Some(h.meta.clone()))
    }

    async fn delete(&self, key: &Key) -> Result<Option<Vec<String>>> {
        Ok(self.lock().remove(key).map(|h| {
            let mut runs: Vec<String> = h.runs.into_iter().map(|r| r.run_id).collect();
            if !h.meta.running.is_empty() {
                runs.push(h.meta.running);
            }
            runs
        }))
    }
}
