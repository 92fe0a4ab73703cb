//! Where experiments' records are kept: beside the runs, with the same
//! retention. In memory (`runs.store = "memory"`) a record is kept
//! `runs.finished_retention` from its end, at most [`MAX_KEPT`] a tenant
//! (the oldest ended one goes first); in Redis (`shared_state`'s
//! experiments) `runs.retention` from its last write.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use baton_proto::v1 as pb;
use prost::Message as _;

use tokio_util::sync::CancellationToken;

use crate::{error::Error, shared_state::SharedState};

/// Most experiments kept a tenant in memory.
pub const MAX_KEPT: usize = 200;

/// A running experiment whose record was not written for this long reads
/// as ABANDONED: its replica stopped without saying so (it writes at least
/// every `app::experiment::WRITTEN_EVERY`; the margin is for replicas'
/// clocks, which may differ by up to half a minute).
pub const ABANDONED_AFTER: Duration = Duration::from_secs(60);

/// How often the replica running an experiment looks whether another
/// asked to cancel it (Redis).
pub const CANCEL_LOOK_EVERY: Duration = Duration::from_secs(1);

/// `record` as a reader sees it: a RUNNING one not written for
/// [`ABANDONED_AFTER`] is ABANDONED.
fn as_read(mut record: pb::Experiment) -> pb::Experiment {
    if record.status == pb::ExperimentStatus::Running as i32 {
        let written = record
            .updated_at
            .as_ref()
            .and_then(|t| std::time::SystemTime::try_from(*t).ok());
        let stale = written.is_some_and(|w| {
            std::time::SystemTime::now()
                .duration_since(w)
                .is_ok_and(|d| d > ABANDONED_AFTER)
        });
        if stale {
            record.status = pb::ExperimentStatus::Abandoned as i32;
        }
    }
    record
}

/// One record kept in memory.
pub struct Kept {
    record: pb::Experiment,
    ended: Option<Instant>,
}

/// Experiments' records.
pub enum Experiments {
    /// In this process.
    Memory {
        /// By tenant, oldest first.
        kept: Mutex<BTreeMap<String, VecDeque<Kept>>>,
        /// How long an ended one is kept.
        retention: Duration,
    },
    /// In Redis.
    Redis(Arc<SharedState>),
}

impl Experiments {
    /// Kept in memory, `retention` from their end.
    pub fn memory(retention: Duration) -> Self {
        Self::Memory {
            kept: Mutex::default(),
            retention,
        }
    }

    /// Writes `record` (new or updated); `first` until a write named it.
    pub async fn put(
        &self,
        tenant: &str,
        record: &pb::Experiment,
        first: bool,
    ) -> Result<(), Error> {
        match self {
            Self::Memory { kept, retention } => {
                let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                let list = kept.entry(tenant.to_owned()).or_default();
                let now = Instant::now();
                list.retain(|k| k.ended.is_none_or(|e| now.duration_since(e) < *retention));
                let ended = (record.status != pb::ExperimentStatus::Running as i32).then_some(now);
                match list.iter_mut().find(|k| k.record.id == record.id) {
                    Some(k) => {
                        k.record = record.clone();
                        k.ended = ended;
                    }
                    None => {
                        list.push_back(Kept {
                            record: record.clone(),
                            ended,
                        });
                        while list.len() > MAX_KEPT {
                            match list.iter().position(|k| k.ended.is_some()) {
                                Some(i) => {
                                    list.remove(i);
                                }
                                None => break,
                            }
                        }
                    }
                }
                Ok(())
            }
            Self::Redis(shared) => {
                let started = record
                    .started_at
                    .as_ref()
                    .map_or(0, |t| t.seconds * 1000 + i64::from(t.nanos) / 1_000_000);
                // Lists read the summary (the record without its cases).
                let summary = pb::Experiment {
                    cases: Vec::new(),
                    ..record.clone()
                };

                shared
                    .put_experiment(
                        tenant,
                        crate::shared_state::experiments::ExperimentWrite {
                            id: &record.id,
                            name: &record.name,
                            started_ms: started,
                            record: &record.encode_to_vec(),
                            summary: &summary.encode_to_vec(),
                            first,
                        },
                    )
                    .await
            }
        }
    }

    /// Asks the replica running experiment `id` to cancel it: in Redis,
    /// for whichever replica it is (see [`Self::cancel_asked`]); in
    /// memory there is no other replica to ask.
    pub async fn ask_cancel(&self, tenant: &str, id: &str) -> Result<(), Error> {
        match self {
            Self::Memory { .. } => Ok(()),
            Self::Redis(shared) => shared.request_experiment_cancel(tenant, id).await,
        }
    }

    /// Returns once experiment `id` was asked to cancel on another replica
    /// (looked at every [`CANCEL_LOOK_EVERY`]; never, in memory).
    pub async fn cancel_asked(&self, tenant: &str, id: &str) {
        match self {
            Self::Memory { .. } => std::future::pending().await,
            Self::Redis(shared) => loop {
                tokio::time::sleep(CANCEL_LOOK_EVERY).await;
                match shared.experiment_cancel_requested(tenant, id).await {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::debug!(experiment = id, error = %e, "could not look for a cancel");
                    }
                }
            },
        }
    }

    /// The experiment with id (or name) `which`.
    pub async fn get(&self, tenant: &str, which: &str) -> Result<Option<pb::Experiment>, Error> {
        match self {
            Self::Memory { kept, retention } => {
                let kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                let live = |k: &&Kept| k.ended.is_none_or(|e| now.duration_since(e) < *retention);
                Ok(kept.get(tenant).and_then(|list| {
                    list.iter()
                        .rev()
                        .filter(live)
                        .find(|k| k.record.id == which)
                        .or_else(|| {
                            list.iter()
                                .rev()
                                .filter(live)
                                .find(|k| k.record.name == which)
                        })
                        .map(|k| as_read(k.record.clone()))
                }))
            }
            Self::Redis(shared) => {
                let id = if which.starts_with("exp-") {
                    which.to_owned()
                } else {
                    match shared.experiment_named(tenant, which).await? {
                        Some(id) => id,
                        None => return Ok(None),
                    }
                };
                Ok(shared
                    .experiment(tenant, &id)
                    .await?
                    .and_then(|b| pb::Experiment::decode(b.as_slice()).ok())
                    .map(as_read))
            }
        }
    }

    /// A page of the tenant's experiments, newest first, without their
    /// cases: the page and the next page's offset.
    pub async fn list(
        &self,
        tenant: &str,
        offset: usize,
        count: usize,
    ) -> Result<(Vec<pb::Experiment>, Option<usize>), Error> {
        let (page, more): (Vec<pb::Experiment>, bool) = match self {
            Self::Memory { kept, retention } => {
                let kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                let all: Vec<pb::Experiment> = kept
                    .get(tenant)
                    .map(|list| {
                        list.iter()
                            .rev()
                            .filter(|k| k.ended.is_none_or(|e| now.duration_since(e) < *retention))
                            .map(|k| k.record.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                let more = all.len() > offset + count;
                (all.into_iter().skip(offset).take(count).collect(), more)
            }
            Self::Redis(shared) => {
                let (records, more) = shared.experiments(tenant, offset, count).await?;
                (
                    records
                        .iter()
                        .filter_map(|b| pb::Experiment::decode(b.as_slice()).ok())
                        .collect(),
                    more,
                )
            }
        };
        let page = page
            .into_iter()
            .map(|mut e| {
                e.cases = Vec::new();
                as_read(e)
            })
            .collect();
        Ok((page, more.then_some(offset + count)))
    }
}

/// The experiments running on this replica, by tenant and id.
#[derive(Default)]
pub struct Here(Mutex<HashMap<(String, String), CancellationToken>>);

/// An experiment running here: cancelled through [`Here::cancel`], gone
/// from the list once dropped.
pub struct Running {
    here: Arc<Here>,
    key: (String, String),
    /// Cancelled when it is asked to stop.
    pub stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.here
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

impl Here {
    /// Experiment `id` of `tenant` runs here until the result is dropped.
    pub fn enter(self: &Arc<Self>, tenant: &str, id: &str) -> Running {
        let key = (tenant.to_owned(), id.to_owned());
        let stop = CancellationToken::new();
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), stop.clone());
        Running {
            here: self.clone(),
            key,
            stop,
        }
    }

    /// Cancels experiment `id` of `tenant` when it runs here; whether it
    /// does.
    pub fn cancel(&self, tenant: &str, id: &str) -> bool {
        let running = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(tenant.to_owned(), id.to_owned()))
            .cloned();
        running.inspect(CancellationToken::cancel).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_record_not_written_for_long_reads_as_abandoned() {
        let at = |ago: u64| Some((std::time::SystemTime::now() - Duration::from_secs(ago)).into());
        let running = |ago| pb::Experiment {
            status: pb::ExperimentStatus::Running as i32,
            updated_at: at(ago),
            ..Default::default()
        };
        assert_eq!(
            as_read(running(5)).status,
            pb::ExperimentStatus::Running as i32
        );
        assert_eq!(
            as_read(running(61)).status,
            pb::ExperimentStatus::Abandoned as i32
        );
        let ended = pb::Experiment {
            status: pb::ExperimentStatus::Completed as i32,
            updated_at: at(3600),
            ..Default::default()
        };
        assert_eq!(
            as_read(ended).status,
            pb::ExperimentStatus::Completed as i32
        );
    }

    #[tokio::test]
    async fn memory_keeps_a_tenants_records_apart_and_finds_the_newest_by_name() {
        let store = Experiments::memory(Duration::from_secs(60));
        let record = |id: &str, name: &str| pb::Experiment {
            id: id.into(),
            name: name.into(),
            status: pb::ExperimentStatus::Completed as i32,
            cases: vec![pb::CaseResult::default()],
            ..Default::default()
        };
        store
            .put("a", &record("exp-1", "main"), true)
            .await
            .expect("put");
        store
            .put("a", &record("exp-2", "main"), true)
            .await
            .expect("put");
        store
            .put("b", &record("exp-3", "main"), true)
            .await
            .expect("put");
        let got = store.get("a", "main").await.expect("get").expect("found");
        assert_eq!(got.id, "exp-2");
        assert!(
            store.get("a", "exp-3").await.expect("get").is_none(),
            "another tenant's"
        );
        let (page, next) = store.list("a", 0, 1).await.expect("list");
        assert_eq!(
            (page[0].id.as_str(), page[0].cases.len(), next),
            ("exp-2", 0, Some(1))
        );
    }
}
