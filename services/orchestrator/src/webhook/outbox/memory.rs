//! The outbox of memory mode: streams in the process, due by this
//! process's clock.

use std::{
    collections::{BTreeSet, HashMap, VecDeque},
    sync::Mutex,
};

use super::entry::{Claim, Dead, Head};
use crate::{
    run::hooks::Queued, shared_state::clock_now_ms as now_ms, webhook::delivery::Delivery,
};

#[derive(Default)]
struct State {
    /// Each stream's deliveries, as JSON, oldest first.
    streams: HashMap<String, VecDeque<String>>,
    /// When each stream not held is due.
    due: BTreeSet<(i64, String)>,
    due_at: HashMap<String, i64>,
    /// Streams held, by token.
    held: HashMap<String, String>,
    /// Dead letters by tenant, oldest first.
    dead: HashMap<String, VecDeque<Dead>>,
    next_token: u64,
}

impl State {
    fn set_due(&mut self, stream: &str, at: i64) {
        if let Some(old) = self.due_at.insert(stream.to_owned(), at) {
            self.due.remove(&(old, stream.to_owned()));
        }
        self.due.insert((at, stream.to_owned()));
    }

    fn unset_due(&mut self, stream: &str) {
        if let Some(old) = self.due_at.remove(stream) {
            self.due.remove(&(old, stream.to_owned()));
        }
    }

    fn holds(&self, claim: &Claim) -> bool {
        self.held.get(&claim.stream) == Some(&claim.token)
    }
}

/// The outbox in the process.
#[derive(Default)]
pub struct MemoryOutbox(Mutex<State>);

impl MemoryOutbox {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn push(&self, deliveries: Vec<Delivery>) {
        self.push_queued(
            deliveries
                .into_iter()
                .filter_map(|d| {
                    Some(Queued {
                        stream: d.stream(),
                        raw: serde_json::to_string(&d).ok()?,
                    })
                })
                .collect(),
        );
    }

    /// Queues deliveries at the ends of their streams.
    pub fn push_queued(&self, queued: Vec<Queued>) {
        let mut s = self.state();
        let now = now_ms();
        for Queued { stream, raw } in queued {
            s.streams.entry(stream.clone()).or_default().push_back(raw);
            if !s.held.contains_key(&stream) && !s.due_at.contains_key(&stream) {
                s.set_due(&stream, now);
            }
        }
    }

    pub(super) fn claim(&self, max: usize) -> Vec<Claim> {
        let mut s = self.state();
        let now = now_ms();
        let due: Vec<String> = s
            .due
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(max)
            .map(|(_, stream)| stream.clone())
            .collect();
        due.into_iter()
            .map(|stream| {
                s.unset_due(&stream);
                s.next_token += 1;
                let token = s.next_token.to_string();
                s.held.insert(stream.clone(), token.clone());
                Claim {
                    stream,
                    token,
                    score: String::new(),
                }
            })
            .collect()
    }

    pub(super) fn head(&self, claim: &Claim) -> Option<Head> {
        let s = self.state();
        if !s.holds(claim) {
            return None;
        }
        let raw = s.streams.get(&claim.stream)?.front()?.clone();
        let delivery = serde_json::from_str(&raw).ok()?;
        Some(Head { raw, delivery })
    }

    pub(super) fn pop(&self, claim: &Claim, raw: &str) -> bool {
        let mut s = self.state();
        if !s.holds(claim) {
            return false;
        }
        let Some(q) = s.streams.get_mut(&claim.stream) else {
            return false;
        };
        if q.front().map(String::as_str) != Some(raw) {
            return false;
        }
        q.pop_front();
        true
    }

    pub(super) fn retry(
        &self,
        claim: &Claim,
        raw: &str,
        updated: &Delivery,
        after_ms: u64,
    ) -> bool {
        let mut s = self.state();
        if !s.holds(claim) {
            return false;
        }
        let Ok(new) = serde_json::to_string(updated) else {
            return false;
        };
        let Some(front) = s.streams.get_mut(&claim.stream).and_then(|q| q.front_mut()) else {
            return false;
        };
        if front != raw {
            return false;
        }
        *front = new;
        s.held.remove(&claim.stream);
        s.set_due(&claim.stream, now_ms() + after_ms as i64);
        true
    }

    pub(super) fn defer(&self, claim: &Claim, after_ms: u64) {
        let mut s = self.state();
        if !s.holds(claim) {
            return;
        }
        s.held.remove(&claim.stream);
        s.set_due(&claim.stream, now_ms() + after_ms as i64);
    }

    pub(super) fn release(&self, claim: &Claim) {
        let mut s = self.state();
        if !s.holds(claim) {
            return;
        }
        s.held.remove(&claim.stream);
        if s.streams.get(&claim.stream).is_some_and(|q| !q.is_empty()) {
            s.set_due(&claim.stream, now_ms());
        } else {
            s.streams.remove(&claim.stream);
        }
    }

    pub(super) fn bury(&self, dead: &Dead, max: usize) {
        let mut s = self.state();
        let list = s.dead.entry(dead.delivery.tenant.clone()).or_default();
        list.retain(|d| d.delivery.id != dead.delivery.id);
        list.push_back(dead.clone());
        while list.len() > max {
            list.pop_front();
        }
    }

    pub(super) fn dead(&self, tenant: &str, max: usize) -> Vec<Dead> {
        let s = self.state();
        s.dead
            .get(tenant)
            .map(|l| l.iter().rev().take(max).cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn unbury(&self, tenant: &str, id: &str) -> Option<Dead> {
        let mut s = self.state();
        let list = s.dead.get_mut(tenant)?;
        let at = list.iter().position(|d| d.delivery.id == id)?;
        list.remove(at)
    }

    pub(super) fn pending(&self) -> usize {
        self.state().streams.values().map(VecDeque::len).sum()
    }
}
