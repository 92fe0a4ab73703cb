//! Where experiments' records are kept: beside the runs, with the same
//! retention. In memory (`runs.store = "memory"`) a record is kept
//! `runs.finished_retention` from its end, at most [`MAX_KEPT`] a tenant
//! (the oldest ended one goes first); in Redis (`shared_state`'s
//! experiments) `runs.retention` from its last write.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use baton_proto::v1 as pb;
use prost::Message as _;

use crate::{error::Error, shared_state::SharedState};

/// Most experiments kept a tenant in memory.
pub const MAX_KEPT: usize = 200;

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

    /// Writes `record` (new or updated).
    pub async fn put(&self, tenant: &str, record: &pb::Experiment) -> Result<(), Error> {
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
                shared
                    .put_experiment(
                        tenant,
                        &record.id,
                        &record.name,
                        started,
                        &record.encode_to_vec(),
                    )
                    .await
            }
        }
    }

    /// The experiment with id (or name) `which`.
    pub async fn get(&self, tenant: &str, which: &str) -> Result<Option<pb::Experiment>, Error> {
        match self {
            Self::Memory { kept, retention } => {
                let kept = kept.lock().unwrap_or_else(|p| p.into_inner());
                let now = Instant::now();
                Ok(kept.get(tenant).and_then(|list| {
                    list.iter()
                        .rev()
                        .filter(|k| k.ended.is_none_or(|e| now.duration_since(e) < *retention))
                        .find(|k| k.record.id == which)
                        .or_else(|| list.iter().rev().find(|k| k.record.name == which))
                        .map(|k| k.record.clone())
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
                    .and_then(|b| pb::Experiment::decode(b.as_slice()).ok()))
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
        let (mut page, more): (Vec<pb::Experiment>, bool) = match self {
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
        for e in &mut page {
            e.cases = Vec::new();
        }
        Ok((page, more.then_some(offset + count)))
    }
}
