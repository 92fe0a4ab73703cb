//! What deleting a conversation deletes (DeleteConversation): a user's
//! "delete my data" leaves none of its text behind.
//!
//! Deleted, in this order: the conversation itself (its messages, runs
//! list and index entry), then its branches (the conversations forks of
//! its runs started), theirs, and so on; then every run of them, and every
//! run made from one of those (a fork, a replay, a fork of a fork…), since
//! a run's events, journal and stored request hold the conversation's
//! text. A run still going is cancelled first, and its record goes once it
//! has ended (a run parked in memory ends as it wakes). Its keys in Redis go
//! at once: a replica still running it finds its log gone and stops.
//!
//! The conversation goes first so that no new message can take its turn
//! while its runs are stopped; a run that took the turn just before and is
//! not registered yet finds, when it holds the turn for its run_timeout,
//! that the conversation is gone, and does not start.

use std::{collections::HashSet, time::Duration};

use baton_proto::v1 as pb;

use super::{
    conversations::key,
    orchestrator::{Caller, Orchestrator, audit},
};
use crate::{
    conversation::{check_id, not_found},
    error::Result,
    request::{MAX_RUNS_PAGE, RunsQuery},
};

impl Orchestrator {
    /// DeleteConversation (see the module docs).
    pub async fn delete_conversation(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<pb::DeleteConversationResponse> {
        let deleted = async {
            check_id("conversation_id", id)?;
            let store = self.services().conversations.store.clone();
            let mut runs: Vec<String> = Vec::new();
            let mut todo = vec![id.to_owned()];
            let mut first = true;
            while let Some(c) = todo.pop() {
                let branches = store.branches(&caller.tenant, &c).await?;
                match store.delete(&key(caller, &c)).await? {
                    Some(of_it) => runs.extend(of_it),
                    None if first => return Err(not_found(id)),
                    None => {}
                }
                first = false;
                todo.extend(branches);
            }
            runs.extend(self.made_from(caller, &runs).await?);
            runs.sort();
            runs.dedup();
            let mut runs_deleted = 0;
            for run in &runs {
                runs_deleted += u32::from(self.forget_run(caller, run).await?);
            }
            Ok(pb::DeleteConversationResponse { runs_deleted })
        }
        .await;
        audit("DeleteConversation", caller, "", "", &deleted);
        deleted
    }

    /// The caller's runs made from `runs` (forks and replays of them, and
    /// of those, …).
    async fn made_from(&self, caller: &Caller, runs: &[String]) -> Result<Vec<String>> {
        let mut origins: Vec<(String, String)> = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .list(
                    caller,
                    &RunsQuery {
                        status: None,
                        waiting: false,
                        failing_scores: false,
                        after: after.take(),
                        size: MAX_RUNS_PAGE,
                    },
                )
                .await?;
            for r in &page.runs {
                let origin = r.forked_from.as_ref().map(|o| o.run_id.clone());
                if let Some(origin) = origin.or_else(|| r.replay_of.clone()) {
                    origins.push((r.run_id.clone(), origin));
                }
            }
            match page.runs.last() {
                Some(last) if !page.next_page_token.is_empty() => {
                    after = Some(last.run_id.clone());
                }
                _ => break,
            }
        }
        let mut known: HashSet<String> = runs.iter().cloned().collect();
        let mut made = Vec::new();
        loop {
            let found: Vec<String> = origins
                .iter()
                .filter(|(run, origin)| known.contains(origin) && !known.contains(run))
                .map(|(run, _)| run.clone())
                .collect();
            if found.is_empty() {
                return Ok(made);
            }
            known.extend(found.iter().cloned());
            made.extend(found);
        }
    }

    /// Stops run `run_id` if it still goes, and deletes its record, here
    /// (once it has ended) and in Redis; whether there was one.
    pub(super) async fn forget_run(&self, caller: &Caller, run_id: &str) -> Result<bool> {
        let services = self.services();
        let here = self
            .runs
            .get(run_id)
            .ok()
            .filter(|r| r.tenant == caller.tenant);
        let stored = match &services.durable {
            Some(durable) => durable
                .meta(run_id)
                .await?
                .filter(|m| m.tenant == caller.tenant),
            None => None,
        };
        let running = here
            .as_ref()
            .is_some_and(|r| r.snapshot().status == pb::RunStatus::Running)
            || stored
                .as_ref()
                .is_some_and(|m| m.status == pb::RunStatus::Running);
        if running {
            let _ = self
                .cancel(caller, run_id, "its conversation was deleted")
                .await;
        }
        if let Some(record) = &here {
            if record.snapshot().status == pb::RunStatus::Running {
                // Its end still has things to do (a parked run's quota):
                // its record goes once it is over.
                let (runs, record, run_id) = (self.runs.clone(), record.clone(), run_id.to_owned());
                self.tasks.spawn(async move {
                    let until = tokio::time::Instant::now() + Duration::from_secs(60);
                    while record.snapshot().status == pb::RunStatus::Running
                        && tokio::time::Instant::now() < until
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    runs.remove(&run_id);
                });
            } else {
                self.runs.remove(run_id);
            }
        }
        let mut found = here.is_some();
        if let Some(durable) = &services.durable {
            found |= durable.delete(&caller.tenant, run_id).await?;
            // A durable run stopping elsewhere finds its record gone and
            // stops without ending: its tenant's run is not counted any
            // more.
            if running {
                services.quotas.stopped(&caller.tenant, run_id, true).await;
            }
        }
        Ok(found)
    }
}
