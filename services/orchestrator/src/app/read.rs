//! Reading runs: get one, list a tenant's, watch one's events from a seq —
//! from this replica's records, from the peer that has the run, or, when
//! runs are durable, from the run store (a run that is not here, or not
//! this replica's to answer about — lost to another replica, its lease
//! possibly lapsed — or a log here that does not reach back far enough: a
//! run resumed here holds only its new events, a finished run's events go
//! `LOG_RETENTION` after its end).

use std::sync::{Arc, atomic::Ordering};

use baton_proto::v1 as pb;

use futures::StreamExt as _;

use super::{
    orchestrator::{Caller, Orchestrator, not_found},
    watch,
};
use crate::{
    error::{Error, Result},
    request::{RunsQuery, validate::check_filter},
    run::{
        durable::RedisRuns,
        events::{self, EventStream, Filter},
        log::LogRead,
        view::{RunPage, RunView},
    },
};

impl Orchestrator {
    /// Run `run_id` of the caller's tenant (GetRun).
    pub async fn get(&self, caller: &Caller, run_id: &str) -> Result<RunView> {
        if let Some(durable) = &self.services().durable
            && self
                .runs
                .get(run_id)
                .map_or_else(|e| matches!(e, Error::NotFound { .. }), |r| !r.is_ours())
        {
            return match durable.meta(run_id).await? {
                Some(meta) if meta.tenant == caller.tenant => Ok(meta.to_view()),
                _ => Err(not_found(run_id, "")),
            };
        }
        match self.run_of(caller, run_id) {
            Ok(run) => {
                let view = run.view();
                // A durable run's end is logged (with its meta, in one
                // script) a moment before this replica's record takes it,
                // and a watcher reading the log may already have seen it:
                // while the record says running, the store has the last
                // word.
                if view.status == pb::RunStatus::Running
                    && run.epoch.load(Ordering::Relaxed) > 0
                    && let Some(durable) = &self.services().durable
                    && let Some(meta) = durable.meta(run_id).await?
                    && meta.status != pb::RunStatus::Running
                {
                    return Ok(meta.to_view());
                }
                // A durable run of a conversation that another replica
                // deleted: gone here too.
                if view.status != pb::RunStatus::Running
                    && run.conversation.get().is_some()
                    && run.epoch.load(Ordering::Relaxed) > 0
                    && let Some(durable) = &self.services().durable
                    && durable.meta(run_id).await?.is_none()
                {
                    self.runs.remove(run_id);
                    return Err(not_found(run_id, ""));
                }
                Ok(view)
            }
            Err(missing) => {
                self.on_peer(caller, run_id, missing, async |p, f| {
                    p.get_run(f, run_id).await
                })
                .await
            }
        }
    }

    /// A page of the caller's tenant's runs (ListRuns): this replica's, or
    /// every replica's when runs are durable.
    pub async fn list(&self, caller: &Caller, query: &RunsQuery) -> Result<RunPage> {
        let RunsQuery {
            status,
            waiting,
            failing_scores,
            after,
            size,
        } = query;
        let page = if let Some(durable) = &self.services().durable {
            let (runs, more) = durable
                .list_waiting(&caller.tenant, *status, *waiting, after.as_deref(), *size)
                .await?;
            RunPage::new(runs.iter().map(|m| m.to_view()).collect(), more)
        } else {
            let (runs, more) =
                self.runs
                    .list_waiting(&caller.tenant, *status, *waiting, after.as_deref(), *size);
            RunPage::new(runs.iter().map(|r| r.view()).collect(), more)
        };
        // Only runs a live scorer failed: the page's others are left out
        // (the next page starts after the whole page, so a page may hold
        // fewer runs, or none, before the last).
        Ok(if *failing_scores {
            RunPage {
                runs: page
                    .runs
                    .into_iter()
                    .filter(|r| r.scores.iter().any(|s| !s.passed))
                    .collect(),
                ..page
            }
        } else {
            page
        })
    }

    /// The events of run `run_id` after `after_seq` that pass `filter`,
    /// then its live ones until its terminal event (WatchRun).
    pub async fn watch(
        &self,
        caller: &Caller,
        run_id: &str,
        after_seq: u64,
        filter: Filter,
    ) -> Result<EventStream> {
        self.check_running()?;
        if run_id.is_empty() {
            return Err(Error::invalid("run_id", "must not be empty"));
        }
        check_filter(&filter, &self.services().defaults)?;
        if let Some(durable) = self.stored_log(caller, run_id, after_seq).await? {
            return Ok(watch::stored(
                durable,
                run_id.to_owned(),
                after_seq,
                filter,
                &self.runs_stop,
                &self.tasks,
            ));
        }
        match self.run_of(caller, run_id) {
            Ok(run) => watch::stream(
                run,
                after_seq,
                filter,
                self.services().defaults.max_watchers_per_run,
                &self.runs_stop,
                &self.tasks,
            ),
            Err(missing) => {
                let remote = self
                    .on_peer(caller, run_id, missing, async |p, f| {
                        p.watch_run(f, run_id, after_seq, &filter).await
                    })
                    .await?;
                Ok(self.relay(remote))
            }
        }
    }

    /// Relays a peer's WatchRun stream to this replica's caller; ends when
    /// either side does, or at shutdown.
    fn relay(
        &self,
        mut remote: futures::stream::BoxStream<'static, Result<baton_proto::v1::RunEvent>>,
    ) -> EventStream {
        let (tx, stream) = events::channel();
        let shutdown = self.runs_stop.clone();
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    // What the peer sent first: a terminal event is read
                    // to the stream's end (its status) even if the caller
                    // left meanwhile, so the peer's stream ends instead of
                    // being reset (resets by the thousand get a connection
                    // closed by HTTP/2's reset-flood protection).
                    biased;
                    item = remote.next() => match item {
                        Some(item) => {
                            let end = item
                                .as_ref()
                                .ok()
                                .and_then(|e| e.payload.as_ref())
                                .is_some_and(events::is_terminal);
                            let sent = tx.send(item.map(Into::into)).await.is_ok();
                            if end {
                                let rest = async { while remote.next().await.is_some() {} };
                                let _ = tokio::time::timeout(std::time::Duration::from_secs(10), rest).await;
                                return;
                            }
                            if !sent {
                                return;
                            }
                        }
                        None => return,
                    },
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => {
                        let _ = tx.send(Err(Error::ShuttingDown)).await;
                        return;
                    }
                }
            }
        });
        stream
    }

    /// Where a watch of a durable run reads from: the run store, when the
    /// run is not here or this replica's log of it does not reach back to
    /// `after_seq`; `None` to read this replica's log.
    async fn stored_log(
        &self,
        caller: &Caller,
        run_id: &str,
        after_seq: u64,
    ) -> Result<Option<Arc<RedisRuns>>> {
        let Some(durable) = &self.services().durable else {
            return Ok(None);
        };
        let here = match self.runs.get(run_id) {
            Ok(run) => Some(run),
            Err(Error::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        // A run of a conversation another replica deleted: gone here too.
        if let Some(run) = &here
            && run.snapshot().status != pb::RunStatus::Running
            && run.conversation.get().is_some()
            && durable.meta(run_id).await?.is_none()
        {
            self.runs.remove(run_id);
            return Err(not_found(run_id, ""));
        }
        // This replica's log, only while the run is its own and the log
        // still holds the events from `after_seq` (not resumed since, not
        // dropped LOG_RETENTION after the end): else the run store has them.
        if let Some(run) = here
            && run.tenant == caller.tenant
            && run.is_ours()
            && after_seq >= run.resumed_after
            && matches!(run.events_after(after_seq, 0), LogRead::Events(..))
        {
            return Ok(None);
        }
        match durable.meta(run_id).await? {
            Some(meta) if meta.tenant == caller.tenant => Ok(Some(durable.clone())),
            _ => Err(not_found(run_id, "")),
        }
    }
}
