//! Schedules in the process (memory mode): the same operations as in
//! Redis, under one lock; a claim's token is the due time it set.

use std::{collections::HashMap, sync::Mutex};

use super::record::{Claim, Claimed, State, Stored};

struct Entry {
    s: Stored,
    due_ms: Option<i64>,
}

/// Schedules in the process.
#[derive(Default)]
pub struct MemorySchedules {
    all: Mutex<HashMap<String, Entry>>,
}

fn now_ms() -> i64 {
    crate::run::launch::now_ms()
}

impl MemorySchedules {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.all.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn put(&self, s: &Stored, due_ms: Option<i64>, replace: bool, most: usize) -> bool {
        let mut all = self.lock();
        if replace && let Some(e) = all.get_mut(&s.id) {
            e.s.def = s.def.clone();
            e.s.tenant = s.tenant.clone();
            if e.s.paused && !s.paused {
                e.s.resumed_ms = s.resumed_ms;
            }
            e.s.paused = s.paused;
            // Due at the sooner of when it was and when it now is.
            e.due_ms = match (s.paused, e.due_ms, due_ms) {
                (true, _, _) => None,
                (false, Some(a), Some(b)) => Some(a.min(b)),
                (false, a, b) => a.or(b),
            };
            return true;
        }
        let mine = all
            .values()
            .filter(|e| e.s.tenant == s.tenant && !e.s.def.from_agents_file)
            .count();
        if !s.def.from_agents_file && mine >= most {
            return false;
        }
        all.insert(
            s.id.clone(),
            Entry {
                s: s.clone(),
                due_ms,
            },
        );
        true
    }

    pub(super) fn get(&self, id: &str) -> Option<Stored> {
        self.lock().get(id).map(|e| e.s.clone())
    }

    pub(super) fn list(&self, tenant: &str) -> Vec<Stored> {
        let mut out: Vec<Stored> = self
            .lock()
            .values()
            .filter(|e| e.s.tenant == tenant)
            .map(|e| e.s.clone())
            .collect();
        out.sort_by(|a, b| {
            let at = |s: &Stored| s.def.created_at.as_ref().map(crate::schedule::spec::ms);
            at(a).cmp(&at(b)).then_with(|| a.id.cmp(&b.id))
        });
        out
    }

    pub(super) fn declared(&self) -> Vec<(String, String)> {
        self.lock()
            .values()
            .filter(|e| e.s.def.from_agents_file)
            .map(|e| (e.s.tenant.clone(), e.s.id.clone()))
            .collect()
    }

    pub(super) fn delete(&self, tenant: &str, id: &str) -> bool {
        let mut all = self.lock();
        if all.get(id).is_some_and(|e| e.s.tenant == tenant) {
            all.remove(id);
            true
        } else {
            false
        }
    }

    pub(super) fn set_paused(
        &self,
        id: &str,
        paused: bool,
        now_ms: i64,
        due_ms: Option<i64>,
    ) -> bool {
        let mut all = self.lock();
        let Some(e) = all.get_mut(id) else {
            return false;
        };
        e.s.paused = paused;
        if paused {
            e.due_ms = None;
        } else {
            e.s.resumed_ms = now_ms;
            // A holder keeps its claim; otherwise due as asked.
            if e.due_ms.is_none() {
                e.due_ms = due_ms;
            }
        }
        true
    }

    pub(super) fn claim(&self, most: usize, lease_ms: i64) -> Claimed {
        let now = now_ms();
        let mut all = self.lock();
        let mut due: Vec<(i64, &String)> = all
            .iter()
            .filter_map(|(id, e)| e.due_ms.filter(|d| *d <= now).map(|d| (d, id)))
            .collect();
        due.sort();
        let ids: Vec<String> = due
            .into_iter()
            .take(most)
            .map(|(_, id)| id.clone())
            .collect();
        let token = now + lease_ms;
        let mut claims = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(e) = all.get_mut(&id) {
                e.due_ms = Some(token);
                claims.push(Claim {
                    id,
                    token: token.to_string(),
                });
            }
        }
        let next_due_ms = all.values().filter_map(|e| e.due_ms).min();
        Claimed {
            now_ms: now,
            claims,
            next_due_ms,
        }
    }

    fn holds<'a>(all: &'a mut HashMap<String, Entry>, claim: &Claim) -> Option<&'a mut Entry> {
        all.get_mut(&claim.id)
            .filter(|e| e.due_ms.map(|d| d.to_string()).as_deref() == Some(claim.token.as_str()))
    }

    pub(super) fn write(&self, claim: &Claim, state: &State, due_ms: Option<i64>) -> bool {
        let mut all = self.lock();
        let Some(e) = Self::holds(&mut all, claim) else {
            return false;
        };
        e.s.state = state.clone();
        e.due_ms = if e.s.paused { None } else { due_ms };
        true
    }

    pub(super) fn release(&self, claim: &Claim, due_ms: i64) -> bool {
        let mut all = self.lock();
        match Self::holds(&mut all, claim) {
            Some(e) => {
                e.due_ms = Some(due_ms);
                true
            }
            None => false,
        }
    }
}
